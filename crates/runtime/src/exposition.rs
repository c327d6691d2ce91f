//! Which text format a scraper gets, and the registries of `prometheus-client` written
//! in it: OpenMetrics 1.0.0 to a client whose `Accept` prefers it (Prometheus does by
//! default), the Prometheus text format 0.0.4 to anyone else (curl, older scrapers).
//! Both the supervisor's `--metrics-address` and the rollout controller's `/metrics`
//! answer through [`Format`].

use std::fmt::Debug;
use std::hash::Hash;

use http::header::{HeaderMap, ACCEPT};
use prometheus_client::encoding::{prometheus_text, text, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::registry::Registry;

/// The media type of OpenMetrics, as `Accept` names it.
const OPENMETRICS: &str = "application/openmetrics-text";
/// The media type of the Prometheus text format.
const PLAIN: &str = "text/plain";

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0: counters typed without `_total`, info metrics, `# EOF`.
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Text,
}

impl Format {
    /// The format `Accept` asks for: OpenMetrics when it accepts it at least as much as
    /// `text/plain` (by `q`), the text format otherwise or without an `Accept`.
    pub fn negotiate(headers: &HeaderMap) -> Format {
        let (mut openmetrics, mut plain) = (0.0f32, 0.0f32);
        let ranges = headers
            .get_all(ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','));
        for range in ranges {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or_default();
            let q = params
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            if media.eq_ignore_ascii_case(OPENMETRICS) {
                openmetrics = openmetrics.max(q);
            } else if media.eq_ignore_ascii_case(PLAIN) {
                plain = plain.max(q);
            }
        }
        if openmetrics > 0.0 && openmetrics >= plain {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => prometheus_text::CONTENT_TYPE,
        }
    }

    /// The text of every metric of `registries`, in this order.
    pub fn encode(self, registries: &[&Registry]) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        match self {
            Format::OpenMetrics => {
                for r in registries {
                    text::encode_registry(&mut out, r)?;
                }
                text::encode_eof(&mut out)?;
            }
            Format::Text => {
                for r in registries {
                    prometheus_text::encode(&mut out, r)?;
                }
            }
        }
        Ok(out)
    }
}

/// Registers the family `name` with one series per label set of `labels`, each exposed
/// from the first scrape (0 included); returns their handles, updated without the
/// family's lock. `help` is written with a full stop added.
pub fn register_series<L, M, const N: usize>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    labels: [L; N],
) -> [M; N]
where
    L: Clone + Hash + Eq + EncodeLabelSet + Debug + Send + Sync + 'static,
    M: EncodeMetric + TypedMetric + Default + Clone + Debug + Send + Sync + 'static,
{
    let family = Family::<L, M>::default();
    let handles = labels.map(|l| family.get_or_create_owned(&l));
    registry.register(name, help, family);
    handles
}

/// Registers the family `name` without labels; returns its handle.
pub fn register_one<M>(registry: &mut Registry, name: &str, help: &str) -> M
where
    M: EncodeMetric + TypedMetric + Default + Clone + Debug + Send + Sync + 'static,
{
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// Where `x` is in `all`: the index of its handle among those [`register_series`] returned
/// for `all`'s labels.
pub fn slot<T: PartialEq + Copy>(all: &[T], x: T) -> usize {
    all.iter().position(|&y| y == x).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn accept(values: &[&str]) -> Format {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(ACCEPT, v.parse().unwrap());
        }
        Format::negotiate(&headers)
    }

    #[test]
    fn openmetrics_only_when_asked_for_first() {
        // Prometheus' default scrape protocols.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(accept(&[prometheus]), Format::OpenMetrics);
        assert_eq!(
            accept(&["application/openmetrics-text"]),
            Format::OpenMetrics
        );
        assert_eq!(
            accept(&["text/html", "Application/OpenMetrics-Text; q=0.3"]),
            Format::OpenMetrics
        );
        // Prometheus configured to prefer the text format.
        let text_first =
            "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5";
        assert_eq!(accept(&[text_first]), Format::Text);
        assert_eq!(accept(&["application/openmetrics-text;q=0"]), Format::Text);
        assert_eq!(accept(&[]), Format::Text);
        assert_eq!(accept(&["*/*"]), Format::Text);
        assert_eq!(accept(&["text/plain"]), Format::Text);
    }

    #[test]
    fn both_formats_write_every_registry() {
        let (mut a, mut b) = (Registry::default(), Registry::default());
        a.register("a", "A", Counter::<u64>::default());
        b.register("b", "B", Counter::<u64>::default());
        let om = Format::OpenMetrics.encode(&[&a, &b]).unwrap();
        assert_eq!(
            om,
            "# HELP a A.\n# TYPE a counter\na_total 0\n# HELP b B.\n# TYPE b counter\nb_total 0\n# EOF\n"
        );
        let text = Format::Text.encode(&[&a, &b]).unwrap();
        assert_eq!(
            text,
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n# HELP b_total B.\n# TYPE b_total counter\nb_total 0\n"
        );
    }
}
