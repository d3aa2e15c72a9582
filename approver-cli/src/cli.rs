//! The command line: clap's types for every subcommand and flag.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::connection::*;

/// Talk to a Warden monitor: ask for decisions, answer approvals (in the
/// terminal or from desktop notifications), check policies, read and verify
/// the audit log.
///
/// The endpoint and token come from --endpoint and --token / --token-file,
/// or WARDEN_ENDPOINT and WARDEN_TOKEN / WARDEN_TOKEN_FILE; several
/// replicas' endpoints separated by commas are tried in turn when one is
/// down. `authorize`
/// needs a harness token, `approvals` an approver token, `audit` an admin
/// token; `policy check` works offline.
#[derive(Debug, Parser)]
#[command(name = "wardenctl", version = warden_version::VERSION)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,
    /// Print machine-readable JSON instead of text
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Ask for one decision, as a harness would (needs a harness token).
    ///
    /// Exit code: 0 ALLOW, 2 DENY, 3 PENDING, 1 error.
    ///
    /// Examples:
    ///   wardenctl authorize --user alice --agent claude-code --session s1 fs.read /home/alice/project/src/main.rs
    ///   wardenctl authorize --user alice --agent claude-code --session s1 exec -- git push origin main
    ///   wardenctl authorize --user alice --agent claude-code --session s1 http.request GET https://crates.io/
    ///   wardenctl authorize --user alice --agent claude-code --session s1 secret.use GITHUB_TOKEN
    ///   wardenctl authorize --user alice --agent claude-code --session s1 tool.call docs search '{"q":"x"}'
    #[command(verbatim_doc_comment)]
    Authorize(AuthorizeArgs),
    /// Pending approvals: list, approve, deny, watch (needs an approver token).
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Time-bounded grants (needs an admin token).
    #[command(subcommand)]
    Grants(GrantsCommand),
    /// Approvers' passkeys for the approval page (needs an admin token).
    #[command(subcommand)]
    Approvers(ApproversCommand),
    /// Sessions: labels and lockdown (needs an admin token).
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Policy folder tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// The audit log (needs an admin token, or --data for a stopped monitor).
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Whether the monitor serves, by the standard gRPC health check (no
    /// token): prints SERVING and exits 0, else exits 1. For container
    /// health checks and scripts.
    Health {
        /// One service's health, e.g. warden.v1.Authority [default: the whole server]
        #[arg(long, default_value = "")]
        service: String,
    },
    /// Print a shell completion script, e.g.
    /// `wardenctl completions bash > /etc/bash_completion.d/wardenctl`.
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub(crate) struct AuthorizeArgs {
    /// The user the agent acts for
    #[arg(long)]
    pub(crate) user: String,
    /// The kind of agent, e.g. claude-code
    #[arg(long)]
    pub(crate) agent: String,
    /// The agent's session id
    #[arg(long)]
    pub(crate) session: String,
    /// Working directory for a relative path or a command
    #[arg(long)]
    pub(crate) cwd: Option<String>,
    /// Why the agent wants to act (shown to approvers)
    #[arg(long)]
    pub(crate) justification: Option<String>,
    /// Extra schema-declared context, a JSON object
    #[arg(long, value_name = "JSON")]
    pub(crate) context_json: Option<String>,
    /// Idempotency key [default: a fresh one]
    #[arg(long)]
    pub(crate) request_id: Option<String>,
    /// Show every policy's part in the decision instead of deciding: with
    /// --policies, offline against that folder; without, the running
    /// monitor's policies, grants, labels and locks (needs an admin token).
    /// Nothing is recorded.
    #[arg(long)]
    pub(crate) explain: bool,
    /// With --explain: a policy folder to try the request against offline
    #[arg(long, value_name = "DIR", requires = "explain")]
    pub(crate) policies: Option<PathBuf>,
    /// With --explain --policies: labels the session holds
    #[arg(long = "label", value_name = "LABEL", requires = "policies")]
    pub(crate) labels: Vec<String>,
    /// The resource kind, when the action's name does not tell
    /// (fs.* file, exec command, http.* http, secret.* secret, tool.* tool)
    #[arg(long, value_enum)]
    pub(crate) kind: Option<Kind>,
    /// The action, e.g. fs.read, exec, http.request, secret.use, tool.call
    pub(crate) action: String,
    /// The resource: PATH | ARGV... | METHOD URL | NAME | SERVER TOOL [ARGS_JSON]
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
    pub(crate) resource: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    File,
    Command,
    Http,
    Secret,
    Tool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ApprovalsCommand {
    /// The approvals waiting for a person, earliest deadline first (long
    /// fields shortened: `show ID` prints one whole).
    List,
    /// One approval in full: the request as sent, the policies in the way,
    /// how it stands.
    Show {
        /// The approval id
        id: String,
    },
    /// Approve one: the monitor checks the request against the policies of
    /// this moment, then the waiting agent may go ahead.
    Approve {
        /// The approval id
        id: String,
        /// A note for the record and the agent
        #[arg(long)]
        note: Option<String>,
        /// Approve for a time window, e.g. 15m (needs grants)
        #[arg(long = "for", value_name = "DURATION")]
        for_: Option<String>,
        /// What the window covers: `exact` resource or its `parent` (needs grants)
        #[arg(long)]
        scope: Option<String>,
        /// Resolve only if the request still has this hash (from `list --json` or a notification)
        #[arg(long)]
        request_hash: Option<String>,
    },
    /// Deny one; the message reaches the agent.
    Deny {
        /// The approval id
        id: String,
        /// Why, for the agent
        #[arg(long)]
        message: Option<String>,
        /// Resolve only if the request still has this hash
        #[arg(long)]
        request_hash: Option<String>,
    },
    /// Print each pending approval as it comes, and how it ends.
    Watch {
        /// Also show each as a desktop notification with Approve and Deny buttons
        /// (for an approval that needs a passkey: Open approval page and Deny)
        #[arg(long)]
        notify: bool,
        /// The approval page's URL (wardend --web), opened in the browser
        /// ($BROWSER, else xdg-open) from a passkey approval's notification
        #[arg(long, value_name = "URL", env = "WARDEN_WEB_URL")]
        page: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ApproversCommand {
    /// A single-use link, valid for 10 minutes, that the approver opens to
    /// register a passkey (wardend must serve --web). NAME is an approver
    /// credential's name; the passkey stands for it and its groups.
    Enroll {
        /// The approver credential's name
        name: String,
    },
    /// The passkeys enrolled.
    List,
    /// Make a registered passkey count: the approver reads its key id from
    /// the page after registering it; confirm that one (a link that leaked
    /// enrols nothing that counts).
    Confirm {
        /// The approver credential's name
        name: String,
        /// The key id the approver read out
        key_id: String,
    },
    /// Remove every passkey of an approver (and end its sign-ins).
    Revoke {
        /// The approver credential's name
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum GrantsCommand {
    /// Give a user's agents actions on a resource scope for a while.
    ///
    /// Example:
    ///   wardenctl grants create --user alice --action fs.write --resource dir:/home/alice/project --for 2h --reason "refactoring"
    #[command(verbatim_doc_comment)]
    Create {
        /// Whose sessions
        #[arg(long)]
        user: String,
        /// Only this session
        #[arg(long)]
        session: Option<String>,
        /// Only this kind of agent
        #[arg(long)]
        agent: Option<String>,
        /// Only the sessions of this harness credential (a session id is
        /// scoped to its harness and user)
        #[arg(long)]
        harness: Option<String>,
        /// An action; repeat for several
        #[arg(long = "action", required = true)]
        actions: Vec<String>,
        /// KIND:ID: file:/x, dir:/x, program:git, domain:github.com, url:https://…, secret:NAME, mcp:SERVER, tool:SERVER/TOOL, command:ARGV
        #[arg(long)]
        resource: String,
        /// How long, e.g. 2h
        #[arg(long = "for", value_name = "DURATION")]
        for_: String,
        /// Why
        #[arg(long)]
        reason: String,
    },
    /// The active grants.
    List {
        /// Only this user's
        #[arg(long)]
        user: Option<String>,
        /// Only this session's
        #[arg(long)]
        session: Option<String>,
    },
    /// Revoke a grant: the very next request no longer sees it.
    Revoke {
        /// The grant id
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// A session's labels and lock. A session id names one session per
    /// harness credential and user: --user and --harness pick one.
    Show {
        /// The session id
        id: String,
        /// The session of this user
        #[arg(long)]
        user: Option<String>,
        /// The session of this harness credential
        #[arg(long)]
        harness: Option<String>,
    },
    /// Lock a session (or with --user / --agent, every session of a user or agent kind):
    /// its requests and pending approvals are denied.
    Lock {
        /// The session id
        id: Option<String>,
        /// Lock every session of this user
        #[arg(long)]
        user: Option<String>,
        /// Lock every session of this agent kind
        #[arg(long)]
        agent: Option<String>,
        /// Why
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lift a lock.
    Unlock {
        /// The session id
        id: Option<String>,
        /// Unlock this user
        #[arg(long)]
        user: Option<String>,
        /// Unlock this agent kind
        #[arg(long)]
        agent: Option<String>,
    },
    /// Drop a session's labels (audited).
    ClearLabels {
        /// The session id
        id: String,
        /// The session of this user
        #[arg(long)]
        user: Option<String>,
        /// The session of this harness credential
        #[arg(long)]
        harness: Option<String>,
        /// Why
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum PolicyCommand {
    /// Load and strictly validate a policy folder with the monitor's own
    /// loader, and prove its invariants (invariants/*.cedar) with the cvc5
    /// solver; print diagnostics with file:line, each invariant broken with
    /// a request that breaks it, and a summary. Exit code 1 when the folder
    /// would not load or an invariant is broken or not proved.
    Check {
        /// The policy folder
        #[arg(default_value = "policies")]
        dir: PathBuf,
        /// Fail when the folder has invariants and no cvc5 to prove them
        /// (without: a warning)
        #[arg(long)]
        require_proofs: bool,
    },
    /// Run the policy test suites in DIR/tests/*.json against DIR with the
    /// monitor's own decision code (no server). Exit code 1 on a failure.
    Test {
        /// The policy folder
        #[arg(default_value = "policies")]
        dir: PathBuf,
    },
    /// Format the *.cedar files in DIR with Cedar's formatter.
    Fmt {
        /// The policy folder
        #[arg(default_value = "policies")]
        dir: PathBuf,
        /// Change nothing; exit code 1 if a file is not formatted
        #[arg(long)]
        check: bool,
    },
    /// What NEW decides otherwise than OLD, proved for every request by
    /// Cedar's symbolic compiler and the cvc5 solver: per principal type,
    /// action and resource type, equivalent, newly permits (DENY or PENDING
    /// to something further), newly forbids, or unknown (never read as
    /// equivalent); each change with a request that shows it and the
    /// `wardenctl authorize --explain` line that reproduces it. Exit code 0
    /// when equivalent, 3 when a change was shown, 4 when a question stayed
    /// open and none was shown.
    Diff {
        /// The policy folder as it is now (or --running)
        #[arg(required_unless_present = "running")]
        old: Option<PathBuf>,
        /// The policy folder as it would be [default: policies]
        new: Option<PathBuf>,
        /// How long the solver may take on one question, e.g. 10s
        #[arg(long, value_name = "DURATION", default_value = "10s")]
        timeout: String,
        /// OLD is the set the running monitor serves (admin token), and the
        /// only folder given is NEW
        #[arg(long)]
        running: bool,
    },
    /// Decide the recorded decisions of the audit log again under the
    /// policies of DIR, each with the facts it was decided with (its time,
    /// the harness, the session's labels, a lock, the cap on waiting
    /// approvals, the grants of that moment; the users' rights are DIR's
    /// entities.json), and list those whose outcome would change, grouped
    /// by the policies responsible, with counts and examples. Reads the running monitor's log (admin
    /// token) or, with --data, a stopped monitor's. Exit code 0 when none
    /// would change, 3 when some would, 4 when none would but some could
    /// not be decided as they were made (the notes say which).
    Replay {
        /// The candidate policy folder
        #[arg(long, value_name = "DIR")]
        policies: PathBuf,
        #[command(flatten)]
        log: LogWindow,
    },
    /// The decisions the shadow policy set ([policy] shadow_dir) answered
    /// otherwise than the live set, as the audit log recorded them, grouped
    /// by outcomes and policies, with counts and examples. Exit code 0 when
    /// there were none, 3 when there were.
    Shadow {
        #[command(flatten)]
        log: LogWindow,
    },
    /// The running monitor's policies: version, files, last error, warnings,
    /// the shadow set (admin token).
    Status,
    /// Make the running monitor load its policy folder now (admin token).
    Reload,
}

/// Which recorded decisions `policy replay` and `policy shadow` read, and
/// from where.
#[derive(Debug, clap::Args)]
pub(crate) struct LogWindow {
    /// The first decision: a sequence number, or an RFC 3339 time
    #[arg(long, value_name = "SEQ|TIME", default_value = "1")]
    pub(crate) since: String,
    /// The last decision: a sequence number, or an RFC 3339 time
    #[arg(long, value_name = "SEQ|TIME")]
    pub(crate) until: Option<String>,
    /// Read the store of a stopped monitor in this data folder
    #[arg(long, value_name = "DIR")]
    pub(crate) data: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Walk the hash chain and name the first bad record. Exit code 1 when
    /// the chain is broken.
    Verify {
        /// Verify the store of a stopped monitor in this data folder instead
        /// of asking the running monitor
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Also check the log against a saved checkpoint (from `audit
        /// checkpoint`): a truncated or rewritten log fails
        #[arg(long, value_name = "FILE")]
        checkpoint: Option<PathBuf>,
    },
    /// Print the running monitor's audit head, signed (one JSON line): save
    /// it somewhere else, and check the log against it later with
    /// `audit verify --checkpoint FILE`.
    Checkpoint,
    /// Write records as JSON lines, one object per record, for a SIEM
    /// (schema in README "Audit export"), from the running monitor or from
    /// a stopped monitor's data folder.
    Export {
        /// The first record: a sequence number, or an RFC 3339 time
        /// (2026-12-01T09:00:00Z) for the first record at or after it
        #[arg(long, value_name = "SEQ|TIME", default_value = "1")]
        since: String,
        /// The last record: a sequence number, or an RFC 3339 time
        #[arg(long, value_name = "SEQ|TIME")]
        until: Option<String>,
        /// After the existing records, keep writing new ones (running
        /// monitor only)
        #[arg(long, conflicts_with = "data")]
        follow: bool,
        /// Read the store of a stopped monitor in this data folder
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
    },
    /// Print the newest records.
    Tail {
        /// How many records
        #[arg(short = 'n', long, default_value_t = 20)]
        count: u32,
        /// Every record from the first
        #[arg(long)]
        all: bool,
        /// Keep printing new records as they are written
        #[arg(long)]
        follow: bool,
    },
}
