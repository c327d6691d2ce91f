//! Man pages and shell completions, generated from the clap definitions so
//! they never drift from `--help`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;

/// Sections of the main page that clap does not know about.
const EXTRA_SECTIONS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Clean shutdown (SIGTERM/SIGINT), or yielded with \fB\-\-exit\-on\-yield\fR; for \fBstatus\fR: a live holder exists.
.TP
\fB1\fR
Runtime failure (the lock file was replaced and somebody else locked the new one; an operator command failed).
.TP
\fB2\fR
Bad input found before start: missing kubelet binary, a lock path that is a symlink or not a regular file, an invalid \fB\-\-init\-config\fR, bad flags.
.TP
\fB3\fR
\fBstatus\fR: no live holder.
.SH SIGNALS
SIGTERM or SIGINT stop the kubelet gracefully (SIGTERM to its process group, SIGKILL after \fB\-\-stop\-timeout\fR) and exit 0; a second one forces SIGKILL at once.
SIGHUP restarts the kubelet with the current configuration.
.SH ENVIRONMENT
Every flag can also be given as \fBKUBELET_PIVOT_\fR\fIFLAG\fR (for example \fBKUBELET_PIVOT_LOCK_FILE\fR); the flag wins.
\fBRUST_LOG\fR sets the log filter (default \fBinfo\fR).
\fBNOTIFY_SOCKET\fR and \fBWATCHDOG_USEC\fR are used as systemd sets them and are not passed to the kubelet.
.SH FILES
.TP
\fI/var/run/lock/kubelet.lock\fR
The node's kubelet lock file (flock); the holder's record sits beside it.
.TP
\fI/var/lib/kubelet\-pivot\fR
The checkpoint store for dynamic kubelet configuration.
.TP
\fI/etc/default/kubelet\-pivot\fR
Flags for the systemd unit, as KUBELET_PIVOT_* variables and KUBELET_ARGS.
"#;

/// The command tree as the binary parses it, built so subcommands know
/// their full names (`kubelet-pivot-bootstrap`).
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes the main page (with exit status, signals, environment and files).
pub fn render_main(w: &mut dyn Write) -> io::Result<()> {
    let man = clap_mangen::Man::new(command());
    man.render(w)?;
    w.write_all(EXTRA_SECTIONS.as_bytes())
}

/// Writes `kubelet-pivot.1` and one page per subcommand
/// (`kubelet-pivot-bootstrap.1`, ...) into `dir`; returns the files written.
pub fn write_all(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let cmd = command();
    let mut written = Vec::new();
    let main = dir.join("kubelet-pivot.1");
    let mut buf = Vec::new();
    render_main(&mut buf)?;
    kp_node::safefs::fsutil::write_atomic(&main, &buf, 0o644).map_err(io::Error::other)?;
    written.push(main);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = clap_mangen::Man::new(sub.clone());
        let path = dir.join(man.get_filename());
        let mut buf = Vec::new();
        man.render(&mut buf)?;
        kp_node::safefs::fsutil::write_atomic(&path, &buf, 0o644).map_err(io::Error::other)?;
        written.push(path);
    }
    Ok(written)
}

/// Writes the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell, w: &mut dyn Write) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "kubelet-pivot", w);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render() -> String {
        let mut buf = Vec::new();
        render_main(&mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn main_page_lists_subcommands_and_exit_codes() {
        let page = render();
        assert!(page.starts_with(".ie"), "{page}");
        for needle in [
            ".TH kubelet-pivot 1",
            "bootstrap",
            "self\\-hosted",
            "EXIT STATUS",
            "KUBELET_PIVOT_",
        ] {
            assert!(page.contains(needle), "missing {needle:?} in\n{page}");
        }
    }

    #[test]
    fn subcommand_pages_carry_their_flags() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(dir.path()).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.contains(&"kubelet-pivot-bootstrap.1".to_string()),
            "{names:?}"
        );
        let page = std::fs::read_to_string(dir.path().join("kubelet-pivot-self-hosted.1")).unwrap();
        assert!(page.contains("generation"), "{page}");
        assert!(page.contains("stop\\-timeout"), "{page}");
    }

    #[test]
    fn completions_know_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut buf = Vec::new();
            completions(shell, &mut buf);
            let text = String::from_utf8(buf).unwrap();
            assert!(text.contains("self-hosted"), "{shell}: {text}");
            assert!(text.contains("dynamic-config-dir"), "{shell}");
        }
    }
}
