//! The plan's inputs, gathered from the caches (and, for a new revision, one ConfigMap
//! read), and the plan made from them.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::ResourceExt;

use super::Context;
use crate::nodeview::NodeView;
use crate::plan::owner::{OtherRollout, SUPERSEDE_ANNOTATION};
use crate::plan::{self, ConfigLookup, Inputs, Plan};
use crate::{parse_ack, ACK_ANNOTATION};
use kp_contract::rollout::{self as types, KubeletConfigRollout};

/// The ConfigMap a new revision rolls out, read when one is due (and its watch started or
/// stopped, so that its creation wakes the rollout up).
pub(super) async fn lookup_config(ctx: &Context, rollout: &KubeletConfigRollout) -> ConfigLookup {
    let status = rollout.status.clone().unwrap_or_default();
    if !plan::needs_new_revision(&rollout.spec, &status) {
        return ConfigLookup::NotNeeded;
    }
    let key = &rollout.spec.config;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &key.namespace);
    let found = api.get_opt(&key.name).await;
    match &found {
        Ok(Some(cm)) if cm.data.as_ref().is_some_and(|d| d.contains_key(&key.key)) => {
            ctx.config_watches.found(&key.namespace, &key.name)
        }
        Ok(_) => ctx.config_watches.missing(&key.namespace, &key.name),
        Err(_) => {}
    }
    match found {
        Ok(Some(cm)) => match cm.data.as_ref().and_then(|d| d.get(&key.key)) {
            Some(payload) => ConfigLookup::Found {
                uid: cm.metadata.uid.clone().unwrap_or_default(),
                trial: plan::nofallback::trial_of(payload),
            },
            None => ConfigLookup::Missing(format!("the ConfigMap has no key {:?}", key.key)),
        },
        Ok(None) => ConfigLookup::Missing(format!("configmaps {:?} not found", key.name)),
        Err(err) => ConfigLookup::Missing(format!("cannot read the ConfigMap: {err}")),
    }
}

/// The plan for `rollout` from the caches as they are now.
pub(super) fn decide(
    ctx: &Context,
    rollout: &KubeletConfigRollout,
    nodes: &[NodeView],
    config: ConfigLookup,
) -> Plan {
    let name = rollout.name_any();
    let status = rollout.status.clone().unwrap_or_default();
    let others = other_rollouts(ctx, rollout);
    let uid = rollout.metadata.uid.clone();
    ctx.pods.with_lookup(&name, status.revision, |pods| {
        plan::plan(&Inputs {
            name: &name,
            uid: uid.as_deref(),
            others: &others,
            supersede: supersedes(rollout),
            generation: rollout.metadata.generation,
            spec: &rollout.spec,
            status: &status,
            acknowledged: rollout
                .annotations()
                .get(ACK_ANNOTATION)
                .and_then(|t| parse_ack(t)),
            nodes,
            now: SystemTime::now(),
            halted: !ctx.stop.state().is_empty(),
            config,
            pods,
        })
    })
}

/// Whether the rollout is marked to take nodes from older rollouts.
fn supersedes(rollout: &KubeletConfigRollout) -> bool {
    rollout
        .annotations()
        .get(SUPERSEDE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// Every other rollout as the cache has it (or as we last wrote it, if newer), for who
/// owns which node.
fn other_rollouts(ctx: &Context, me: &KubeletConfigRollout) -> Vec<OtherRollout> {
    ctx.rollouts
        .state()
        .into_iter()
        .filter(|r| r.metadata.uid != me.metadata.uid)
        // One that cannot be read owns no node (it is reported on itself).
        .filter_map(|raw| {
            serde_json::to_value(&*raw)
                .ok()
                .and_then(|v| types::decode(v).ok())
                .map(Arc::new)
        })
        .map(|cached| other(&ctx.latest.ours_or(cached)))
        .collect()
}

/// What the plan needs to know of another rollout.
fn other(r: &KubeletConfigRollout) -> OtherRollout {
    let status = r.status.clone().unwrap_or_default();
    let started =
        plan::revision::current(&status).and_then(|c| kp_contract::time::parse(&c.started));
    OtherRollout {
        name: r.name_any(),
        uid: r.metadata.uid.clone(),
        started,
        active: status.phase.owns_its_nodes(),
        supersedes: supersedes(r),
        targets: status.batches.iter().flatten().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kp_contract::rollout::Phase;

    fn rollout(annotations: serde_json::Value) -> KubeletConfigRollout {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubelet-pivot.io/v1alpha1",
            "kind": "KubeletConfigRollout",
            "metadata": {"name": "older", "uid": "u0", "annotations": annotations},
            "spec": {"config": {"namespace": "kc", "name": "cfg"}},
        }))
        .expect("a rollout")
    }

    #[test]
    fn supersede_is_the_annotation_set_to_true() {
        assert!(supersedes(&rollout(
            serde_json::json!({SUPERSEDE_ANNOTATION: "true"})
        )));
        assert!(!supersedes(&rollout(
            serde_json::json!({SUPERSEDE_ANNOTATION: "yes"})
        )));
        assert!(!supersedes(&rollout(serde_json::json!({}))));
    }

    #[test]
    fn another_rollout_owns_its_targets_while_it_runs() {
        let mut r = rollout(serde_json::json!({}));
        let o = other(&r);
        assert_eq!((o.name.as_str(), o.uid.as_deref()), ("older", Some("u0")));
        assert!(o.active, "Pending owns its nodes");
        assert!(o.targets.is_empty() && o.started.is_none() && !o.supersedes);
        r.status = serde_json::from_value(serde_json::json!({
            "phase": "Progressing",
            "revision": 1,
            "batches": [["n1"], ["n2", "n3"]],
            "history": [{"revision": 1, "config": {"namespace": "kc", "name": "cfg"},
                         "started": "2026-01-01T00:00:00Z"}],
        }))
        .expect("a status");
        let o = other(&r);
        assert!(o.active);
        assert_eq!(o.targets.len(), 3);
        assert!(o.started.is_some());
        if let Some(s) = r.status.as_mut() {
            s.phase = Phase::Completed;
        }
        assert!(!other(&r).active);
    }
}
