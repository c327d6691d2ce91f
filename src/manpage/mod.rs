//! Man pages, generated from the clap definitions so they never drift from
//! `--help`: `kubelet-pivot(1)` and one page per subcommand, nested ones
//! included (`kubelet-pivot-rollout-start(1)`), each with EXIT STATUS and
//! FILES from one table ([`facts`]).

mod facts;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;

/// Sections of the main page that clap does not know about, besides EXIT
/// STATUS and FILES.
const MAIN_SECTIONS: &str = r#".SH SIGNALS
SIGTERM or SIGINT stop the kubelet gracefully (SIGTERM to its process group, SIGKILL after \fB\-\-stop\-timeout\fR) and exit 0; a second one forces SIGKILL at once.
SIGHUP restarts the kubelet with the current configuration.
.SH ENVIRONMENT
Every flag can also be given as \fBKUBELET_PIVOT_\fR\fIFLAG\fR (for example \fBKUBELET_PIVOT_LOCK_FILE\fR); the flag wins.
\fBRUST_LOG\fR sets the log filter (default \fBinfo\fR).
\fBNOTIFY_SOCKET\fR and \fBWATCHDOG_USEC\fR are used as systemd sets them and are not passed to the kubelet.
"#;

/// The command tree as the binary parses it, built so subcommands know
/// their full names (`kubelet-pivot-bootstrap`), without `help` subcommands.
fn command() -> clap::Command {
    let mut cmd = without_help(Cli::command());
    cmd.build();
    cmd
}

fn without_help(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help)
}

/// One page: the command's own sections, EXIT STATUS and FILES from the
/// table, SEE ALSO naming its parent's page.
fn render(
    cmd: &clap::Command,
    path: &[&str],
    parent: Option<&str>,
    w: &mut dyn Write,
) -> io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    // The sections clap_mangen's own render() writes, on the same conditions.
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if cmd.get_after_long_help().is_some() || cmd.get_after_help().is_some() {
        man.render_extra_section(w)?;
    }
    let facts = facts::for_command(path);
    write_exit_status(facts, w)?;
    if path.is_empty() {
        w.write_all(MAIN_SECTIONS.as_bytes())?;
    }
    write_files(facts, w)?;
    if let Some(parent) = parent {
        writeln!(w, ".SH \"SEE ALSO\"\n\\fB{}\\fR(1)", roff_name(parent))?;
    }
    // clap_mangen unwraps the version: only the top command has one.
    if cmd
        .get_version()
        .or_else(|| cmd.get_long_version())
        .is_some()
    {
        man.render_version_section(w)?;
    }
    Ok(())
}

fn write_exit_status(facts: &facts::Facts, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for exit in facts.exits {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", exit.code, exit.meaning)?;
    }
    Ok(())
}

fn write_files(facts: &facts::Facts, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, ".SH FILES")?;
    if facts.files.is_empty() {
        return writeln!(w, "None besides those named on the command line.");
    }
    for file in facts.files {
        writeln!(w, ".TP\n\\fI{}\\fR\n{}", file.path, file.what)?;
    }
    Ok(())
}

/// A page name as roff text (hyphens escaped).
fn roff_name(name: &str) -> String {
    name.replace('-', "\\-")
}

/// Writes the main page.
pub fn render_main(w: &mut dyn Write) -> io::Result<()> {
    render(&command(), &[], None, w)
}

/// Writes `kubelet-pivot.1` and one page per subcommand, nested ones
/// included (`kubelet-pivot-rollout-start.1`), into `dir`, creating it;
/// returns the files written.
pub fn write_all(dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    write_tree(&command(), &mut Vec::new(), None, dir, &mut written)?;
    Ok(written)
}

fn write_tree<'a>(
    cmd: &'a clap::Command,
    path: &mut Vec<&'a str>,
    parent: Option<&str>,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let name = clap_mangen::Man::new(cmd.clone()).get_filename();
    let file = dir.join(&name);
    let mut buf = Vec::new();
    render(cmd, path, parent, &mut buf)?;
    kp_node::safefs::fsutil::write_atomic(&file, &buf, 0o644).map_err(io::Error::other)?;
    written.push(file);
    let page = name.trim_end_matches(".1").to_owned();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        path.push(sub.get_name());
        write_tree(sub, path, Some(&page), dir, written)?;
        path.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests;
