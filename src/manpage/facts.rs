//! The one table of exit codes and files per command, for the man pages'
//! EXIT STATUS and FILES sections. The codes are the constants the code
//! exits with.

use kp_rollout::cli::configcheck as check;

/// One exit status of a command.
pub struct Exit {
    pub code: u8,
    pub meaning: &'static str,
}

/// One file or directory a command reads or writes.
pub struct File {
    pub path: &'static str,
    pub what: &'static str,
}

/// What one page says in EXIT STATUS and FILES.
pub struct Facts {
    pub exits: &'static [Exit],
    pub files: &'static [File],
}

const USAGE: Exit = Exit {
    code: crate::EXIT_USAGE,
    meaning: "Bad flags or arguments (the usage error is printed).",
};

const NO_HOLDER: u8 = 3;
const _: () = assert!(NO_HOLDER as i32 == kp_node::observe::status::EXIT_NO_HOLDER);
const NEEDS_ROOT: u8 = 5;
const _: () = assert!(NEEDS_ROOT as i32 == kp_node::observe::preflight::EXIT_NEEDS_ROOT);

const LOCK_FILE: File = File {
    path: "/var/run/lock/kubelet.lock",
    what: "The node's kubelet lock file (\\-\\-lock\\-file): an empty file, root's, 0600, flock'ed by the holder and by its kubelet.",
};
const STORE: File = File {
    path: "/var/lib/kubelet\\-pivot",
    what: "The checkpoint store (\\-\\-dynamic\\-config\\-dir): meta/assigned, meta/last\\-known\\-good, checkpoints/UID/RESOURCE_VERSION/, v1/*.json (bad configs, trial, effective config, drain record), effective/kubelet\\-config.json.",
};
const HOLDER: File = File {
    path: "/var/lib/kubelet\\-pivot/lock/holder.json",
    what: "In the state directory (\\-\\-state\\-dir, default DYNAMIC_CONFIG_DIR/lock, 0700): the holder record (role, generation, pids and start times, boot id, the lock inode it holds, its build).",
};
const CLAIMS: File = File {
    path: "/var/lib/kubelet\\-pivot/lock/claims/",
    what: "One claim per live supervisor (PID\\-START.json), flock'ed by it for its whole life.",
};
const STATE_OTHERS: File = File {
    path: "/var/lib/kubelet\\-pivot/lock/{takeover.lock,lock\\-file.json,lock\\-mismatch.json,api.json,kubelet\\-version.json}",
    what: "The takeover lock, the node's lock file by identity and the last refusal of another one, the holder's API access (for status), the kubelet version cache.",
};
const DEFAULTS: File = File {
    path: "/etc/default/kubelet\\-pivot",
    what: "The systemd unit's EnvironmentFile: KUBELET_PIVOT_* variables and KUBELET_ARGS. status and checkpoint take their defaults from its KUBELET_PIVOT_* variables (KUBELET_PIVOT_ENV_FILE names another file, empty: none); the supervisors get them from systemd and do not read it.",
};
const KUBELET_ROOT: File = File {
    path: "/var/lib/kubelet",
    what: "The kubelet's root directory (\\-\\-kubelet\\-root\\-dir): cpu_manager_state and memory_manager_state are moved aside when a config change needs it.",
};
const KUBECONFIG: File = File {
    path: "~/.kube/config",
    what: "The kubeconfig when neither \\-\\-kubeconfig nor $KUBECONFIG names one (else the in\\-cluster service account).",
};

const SUPERVISOR: Facts = Facts {
    exits: &[
        Exit { code: 0, meaning: "Clean shutdown (SIGTERM/SIGINT), or yielded with \\-\\-exit\\-on\\-yield." },
        Exit { code: crate::EXIT_FAILURE, meaning: "Runtime failure (the lock file cannot be opened or re\\-created; the metrics address cannot be bound)." },
        Exit { code: crate::EXIT_USAGE, meaning: "Bad input found before start: missing kubelet binary, a lock path that is a symlink or not a regular file, an invalid \\-\\-init\\-config or \\-\\-config\\-dir drop\\-ins, an untrusted state directory, a refused kubelet flag after \\-\\-, bad flags." },
        Exit { code: crate::EXIT_LOCK_MISMATCH, meaning: "The lock file refused: another one than the node's, a missing lock directory other than the default's, or (self\\-hosted) a host path not mounted." },
    ],
    files: &[LOCK_FILE, HOLDER, CLAIMS, STATE_OTHERS, STORE, KUBELET_ROOT, DEFAULTS],
};

/// The facts of the page for `path` (the subcommand names below
/// `kubelet-pivot`; empty for the main page). A nested command without an
/// entry of its own has its parent's.
pub fn for_command(path: &[&str]) -> &'static Facts {
    match path {
        [] => &MAIN,
        ["bootstrap"] | ["self-hosted"] => &SUPERVISOR,
        ["status"] => &STATUS,
        ["checkpoint", ..] => &CHECKPOINT,
        ["completions"] => &COMPLETIONS,
        ["man"] => &MAN,
        ["config", ..] => &CONFIG,
        ["rollout", "status"] => &ROLLOUT_STATUS,
        ["rollout", "crd"] => &ROLLOUT_CRD,
        ["rollout", ..] => &ROLLOUT,
        ["rollout-controller"] => &CONTROLLER,
        [_, ..] => &OTHER,
    }
}

const MAIN: Facts = Facts {
    exits: &[
        Exit { code: 0, meaning: "Clean shutdown (SIGTERM/SIGINT), or yielded with \\-\\-exit\\-on\\-yield; for status: a live holder exists." },
        Exit { code: crate::EXIT_FAILURE, meaning: "Runtime failure (the lock file cannot be opened or re\\-created; the metrics address cannot be bound; an operator command failed)." },
        Exit { code: crate::EXIT_USAGE, meaning: "Bad input found before start (see \\%kubelet\\-pivot\\-bootstrap(1)), bad flags." },
        Exit { code: NO_HOLDER, meaning: "status: no live holder. Other commands have codes of their own: see their pages." },
        Exit { code: crate::EXIT_LOCK_MISMATCH, meaning: "A supervisor refused its lock file (see \\%kubelet\\-pivot\\-bootstrap(1))." },
        Exit { code: NEEDS_ROOT, meaning: "status, checkpoint: the node's state cannot be read without root (run it with sudo)." },
    ],
    files: SUPERVISOR.files,
};

const STATUS: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "A live holder exists.",
        },
        Exit {
            code: crate::EXIT_FAILURE,
            meaning: "The status cannot be printed.",
        },
        Exit { code: crate::EXIT_USAGE, meaning: "The lock file or the checkpoint store does not exist (the path is printed), the settings file is bad, or bad flags." },
        Exit {
            code: NO_HOLDER,
            meaning: "No live holder.",
        },
        Exit { code: NEEDS_ROOT, meaning: "Not root: the state directory or the store cannot be read (run it with sudo)." },
    ],
    files: &[LOCK_FILE, HOLDER, CLAIMS, STATE_OTHERS, STORE, DEFAULTS],
};

const CHECKPOINT: Facts = Facts {
    exits: &[
        Exit { code: 0, meaning: "Done." },
        Exit { code: crate::EXIT_FAILURE, meaning: "The command failed (the store cannot be read or written, an unknown UID, a payload that does not validate without \\-\\-force)." },
        Exit { code: crate::EXIT_USAGE, meaning: "The checkpoint store does not exist (it is never created here; the path is printed), the settings file is bad, or bad flags." },
        Exit { code: NEEDS_ROOT, meaning: "Not root: the store cannot be read (run it with sudo)." },
    ],
    files: &[STORE, DEFAULTS],
};

const COMPLETIONS: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "The script was printed.",
        },
        Exit {
            code: crate::EXIT_FAILURE,
            meaning: "It cannot be written.",
        },
        USAGE,
    ],
    files: &[],
};

const MAN: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "The pages were written (with \\-\\-out\\-dir: their paths are printed).",
        },
        Exit {
            code: crate::EXIT_FAILURE,
            meaning: "A page cannot be written (the directory cannot be created, a write failed).",
        },
        USAGE,
    ],
    files: &[],
};

const CONFIG: Facts = Facts {
    exits: &[
        Exit { code: check::EXIT_OK, meaning: "FILE is valid (with \\-\\-against: the change restarts the kubelet in place, or changes nothing)." },
        Exit { code: check::EXIT_INVALID, meaning: "FILE is invalid." },
        Exit { code: check::EXIT_USAGE, meaning: "A file cannot be read, or a flag is wrong." },
        Exit { code: check::EXIT_AGAINST_INVALID, meaning: "The \\-\\-against config does not load." },
        Exit { code: check::EXIT_DRAIN, meaning: "The change needs a drain." },
        Exit { code: check::EXIT_HOLD, meaning: "The change needs a new node (held)." },
    ],
    files: &[],
};

const ROLLOUT_EXITS: [Exit; 3] = [
    Exit { code: 0, meaning: "Done." },
    Exit { code: crate::EXIT_FAILURE, meaning: "The API server refused or could not be reached, or (start) a check refused the rollout; nothing was changed then." },
    USAGE,
];

const ROLLOUT: Facts = Facts {
    exits: &ROLLOUT_EXITS,
    files: &[KUBECONFIG],
};

const ROLLOUT_CRD: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "The CRD was printed.",
        },
        USAGE,
    ],
    files: &[],
};

const ROLLOUT_STATUS: Facts = Facts {
    exits: &[
        Exit { code: 0, meaning: "The rollout is progressing, paused by hand or completed." },
        Exit { code: crate::EXIT_FAILURE, meaning: "The API server refused or could not be reached." },
        USAGE,
        Exit { code: kp_rollout::cli::EXIT_FAILED, meaning: "The rollout paused because nodes failed, completed with failed nodes, or its spec is invalid." },
        Exit { code: kp_rollout::cli::EXIT_TIMEOUT, meaning: "\\-\\-watch \\-\\-timeout passed first." },
    ],
    files: &[KUBECONFIG],
};

const CONTROLLER: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "Stopped (SIGTERM/SIGINT).",
        },
        Exit {
            code: crate::EXIT_FAILURE,
            meaning: "The controller failed (no client, the API server refused).",
        },
        USAGE,
    ],
    files: &[KUBECONFIG],
};

const OTHER: Facts = Facts {
    exits: &[
        Exit {
            code: 0,
            meaning: "Done.",
        },
        USAGE,
    ],
    files: &[],
};
