//! `wardenctl`: the command line of Warden's approvers and security team.

#![forbid(unsafe_code)]

mod approvals;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_stream::StreamExt;
use warden_proto::v1 as pb;
use warden_proto::v1::admin_client::AdminClient;
use warden_sdk::{ActionRequest, Actor, BearerToken, Client, Decision, Outcome};

/// Talk to a Warden monitor: ask for decisions, answer approvals (in the
/// terminal or from desktop notifications), check policies, read and verify
/// the audit log.
///
/// The endpoint and token come from --endpoint and --token / --token-file,
/// or WARDEN_ENDPOINT and WARDEN_TOKEN / WARDEN_TOKEN_FILE. `authorize`
/// needs a harness token, `approvals` an approver token, `audit` an admin
/// token; `policy check` works offline.
#[derive(Debug, Parser)]
#[command(name = "wardenctl", version)]
struct Cli {
    #[command(flatten)]
    connection: Connection,
    /// Print machine-readable JSON instead of text
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Connection {
    /// The monitor's gRPC endpoint
    #[arg(long, global = true, env = "WARDEN_ENDPOINT", default_value = warden_sdk::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// The bearer token
    #[arg(long, global = true, env = "WARDEN_TOKEN", hide_env_values = true, conflicts_with = "token_file")]
    token: Option<String>,
    /// A file holding the bearer token, e.g. .warden/harness.token
    #[arg(long, global = true, env = "WARDEN_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// For an https:// endpoint: the CA that signed the monitor's certificate (PEM)
    #[arg(long, global = true, env = "WARDEN_CA_CERT", value_name = "FILE")]
    ca_cert: Option<PathBuf>,
    /// For mutual TLS: this client's certificate (PEM); a configured one
    /// identifies an approver or admin without a token
    #[arg(long, global = true, env = "WARDEN_CLIENT_CERT", value_name = "FILE", requires = "client_key")]
    client_cert: Option<PathBuf>,
    /// For mutual TLS: this client's private key (PEM)
    #[arg(long, global = true, env = "WARDEN_CLIENT_KEY", value_name = "FILE", requires = "client_cert")]
    client_key: Option<PathBuf>,
}

impl Connection {
    fn token(&self) -> anyhow::Result<String> {
        match (&self.token, &self.token_file) {
            (Some(token), _) => Ok(token.trim().to_owned()),
            (None, Some(path)) => Ok(std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?
                .trim()
                .to_owned()),
            (None, None) => bail!("no token: give --token, --token-file, WARDEN_TOKEN or WARDEN_TOKEN_FILE"),
        }
    }

    async fn channel(&self) -> anyhow::Result<tonic::transport::Channel> {
        let mut endpoint = tonic::transport::Endpoint::from_shared(self.endpoint.clone())
            .with_context(|| format!("endpoint `{}`", self.endpoint))?
            .connect_timeout(Duration::from_secs(5));
        if self.endpoint.starts_with("https://") {
            let read =
                |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
            let mut tls = tonic::transport::ClientTlsConfig::new();
            if let Some(ca) = &self.ca_cert {
                tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
            }
            if let (Some(cert), Some(key)) = (&self.client_cert, &self.client_key) {
                tls = tls.identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
            }
            endpoint = endpoint.tls_config(tls).context("TLS settings")?;
        }
        endpoint.connect().await.with_context(|| format!("cannot reach the monitor at {}", self.endpoint))
    }

    /// The token, or none when a client certificate stands for it.
    fn optional_token(&self) -> anyhow::Result<Option<BearerToken>> {
        if self.token.is_none() && self.token_file.is_none() && self.client_cert.is_some() {
            return Ok(None);
        }
        Ok(Some(BearerToken::new(&self.token()?)?))
    }

    async fn harness(&self) -> anyhow::Result<Client> {
        let token = BearerToken::new(&self.token()?)?;
        Ok(Client::with_channel(self.channel().await?, token))
    }

    async fn approvals(&self) -> anyhow::Result<approvals::ApprovalsClient> {
        let token = self.optional_token()?;
        Ok(warden_proto::v1::approvals_client::ApprovalsClient::with_interceptor(
            self.channel().await?,
            MaybeToken(token),
        ))
    }

    async fn admin(&self) -> anyhow::Result<Admin> {
        let token = self.optional_token()?;
        Ok(AdminClient::with_interceptor(self.channel().await?, MaybeToken(token)))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// Sessions: labels and lockdown (needs an admin token).
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Policy folder tools.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// The audit log (needs an admin token, or --data for a stopped monitor).
    #[command(subcommand)]
    Audit(AuditCommand),
}

#[derive(Debug, Args)]
struct AuthorizeArgs {
    /// The user the agent acts for
    #[arg(long)]
    user: String,
    /// The kind of agent, e.g. claude-code
    #[arg(long)]
    agent: String,
    /// The agent's session id
    #[arg(long)]
    session: String,
    /// Working directory for a relative path or a command
    #[arg(long)]
    cwd: Option<String>,
    /// Why the agent wants to act (shown to approvers)
    #[arg(long)]
    justification: Option<String>,
    /// Extra schema-declared context, a JSON object
    #[arg(long, value_name = "JSON")]
    context_json: Option<String>,
    /// Idempotency key [default: a fresh one]
    #[arg(long)]
    request_id: Option<String>,
    /// Show every policy's part in the decision instead of deciding: with
    /// --policies, offline against that folder; without, the running
    /// monitor's policies, grants, labels and locks (needs an admin token).
    /// Nothing is recorded.
    #[arg(long)]
    explain: bool,
    /// With --explain: a policy folder to try the request against offline
    #[arg(long, value_name = "DIR", requires = "explain")]
    policies: Option<PathBuf>,
    /// With --explain --policies: labels the session holds
    #[arg(long = "label", value_name = "LABEL", requires = "policies")]
    labels: Vec<String>,
    /// The resource kind, when the action's name does not tell
    /// (fs.* file, exec command, http.* http, secret.* secret, tool.* tool)
    #[arg(long, value_enum)]
    kind: Option<Kind>,
    /// The action, e.g. fs.read, exec, http.request, secret.use, tool.call
    action: String,
    /// The resource: PATH | ARGV... | METHOD URL | NAME | SERVER TOOL [ARGS_JSON]
    #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
    resource: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    File,
    Command,
    Http,
    Secret,
    Tool,
}

#[derive(Debug, Subcommand)]
enum ApprovalsCommand {
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
        #[arg(long)]
        notify: bool,
    },
}

#[derive(Debug, Subcommand)]
enum GrantsCommand {
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
enum SessionsCommand {
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
enum PolicyCommand {
    /// Load and strictly validate a policy folder with the monitor's own
    /// loader; print diagnostics with file:line and a summary. Exit code 1
    /// when the folder would not load.
    Check {
        /// The policy folder
        #[arg(default_value = "policies")]
        dir: PathBuf,
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
    /// The running monitor's policies: version, files, last error, warnings (admin token).
    Status,
    /// Make the running monitor load its policy folder now (admin token).
    Reload,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("wardenctl: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            match error.downcast_ref::<tonic::Status>() {
                Some(status) => {
                    eprintln!("wardenctl: the monitor refused the call ({:?}): {}", status.code(), status.message())
                }
                None => eprintln!("wardenctl: {error:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Authorize(args) => authorize(&cli.connection, args, cli.json).await,
        Command::Approvals(command) => {
            let client = cli.connection.approvals().await?;
            match command {
                ApprovalsCommand::List => approvals::list(client, cli.json).await?,
                ApprovalsCommand::Show { id } => approvals::show(client, &id, cli.json).await?,
                ApprovalsCommand::Approve { id, note, for_, scope, request_hash } => {
                    let grant_for_seconds = match for_ {
                        Some(text) => warden_monitor::duration::parse_duration(&text)?.as_secs(),
                        None => 0,
                    };
                    let request = pb::ResolveRequest {
                        approval_id: id,
                        approve: true,
                        note: note.unwrap_or_default(),
                        grant_for_seconds,
                        grant_scope: scope.unwrap_or_default(),
                        request_hash: request_hash.unwrap_or_default(),
                    };
                    approvals::resolve(client, request, cli.json).await?;
                }
                ApprovalsCommand::Deny { id, message, request_hash } => {
                    let request = pb::ResolveRequest {
                        approval_id: id,
                        approve: false,
                        note: message.unwrap_or_default(),
                        grant_for_seconds: 0,
                        grant_scope: String::new(),
                        request_hash: request_hash.unwrap_or_default(),
                    };
                    approvals::resolve(client, request, cli.json).await?;
                }
                ApprovalsCommand::Watch { notify } => approvals::watch(client, notify, cli.json).await?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Grants(command) => {
            grants(cli.connection.admin().await?, command, cli.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Sessions(command) => {
            sessions(cli.connection.admin().await?, command, cli.json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy(PolicyCommand::Check { dir }) => Ok(policy_check(&dir, cli.json)),
        Command::Policy(PolicyCommand::Test { dir }) => policy_test(&dir, cli.json),
        Command::Policy(PolicyCommand::Fmt { dir, check }) => policy_fmt(&dir, check),
        Command::Policy(PolicyCommand::Status) => {
            let status = cli.connection.admin().await?.policy_status(pb::PolicyStatusRequest {}).await?.into_inner();
            print_status(&status, cli.json);
            Ok(if status.error.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Policy(PolicyCommand::Reload) => {
            let reloaded =
                cli.connection.admin().await?.reload_policies(pb::ReloadPoliciesRequest {}).await?.into_inner();
            let status = reloaded.status.unwrap_or_default();
            if !cli.json {
                println!(
                    "{}",
                    if reloaded.loaded {
                        "reloaded"
                    } else {
                        "the folder did not load; the last good policies keep serving"
                    }
                );
            }
            print_status(&status, cli.json);
            Ok(if reloaded.loaded { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Audit(AuditCommand::Verify { data, checkpoint }) => {
            audit_verify(&cli.connection, data, checkpoint, cli.json).await
        }
        Command::Audit(AuditCommand::Checkpoint) => {
            let response = cli.connection.admin().await?.verify_audit(pb::VerifyAuditRequest {}).await?.into_inner();
            let Some(c) = response.checkpoint else { bail!("the monitor signed no checkpoint") };
            if !response.ok {
                eprintln!(
                    "wardenctl: the chain is broken at #{}: the checkpoint covers the records before it",
                    response.first_bad_seq
                );
            }
            let checkpoint = warden_monitor::checkpoint::Checkpoint {
                seq: c.seq,
                hash: c.hash,
                time_unix_ns: c.time_unix_ns,
                public_key: c.public_key,
                signature: c.signature,
            };
            println!("{}", serde_json::to_string(&checkpoint)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(AuditCommand::Tail { count, all, follow }) => {
            audit_tail(&cli.connection, count, all, follow, cli.json).await
        }
    }
}

async fn authorize(connection: &Connection, args: AuthorizeArgs, json: bool) -> anyhow::Result<ExitCode> {
    let kind = match args.kind {
        Some(kind) => kind,
        None => kind_of(&args.action)?,
    };
    let resource = resource(kind, &args.resource)?;
    let mut request = ActionRequest::new(&args.action, resource);
    if let Some(cwd) = args.cwd {
        request = request.cwd(cwd);
    }
    if let Some(text) = args.justification {
        request = request.justification(text);
    }
    if let Some(context) = args.context_json {
        request = request.context_json(context);
    }
    if let Some(id) = args.request_id {
        request = request.request_id(id);
    }
    if args.explain {
        let message = pb::AuthorizeRequest {
            request_id: String::new(),
            actor: Some(pb::Actor { user: args.user, agent: args.agent, session: args.session }),
            ..request.into_proto_request()
        };
        let explanation = match &args.policies {
            Some(dir) => explain_offline(dir, message, &args.labels)?,
            None => connection.admin().await?.explain(message).await?.into_inner(),
        };
        print_explanation(&explanation, json);
        return Ok(ExitCode::SUCCESS);
    }
    let client = connection.harness().await?;
    let actor = Actor::new(args.user, args.agent, args.session);
    let decision = client.authorize(&actor, request).await?;
    if json {
        println!("{}", decision_json(&decision));
    } else {
        print_decision(&decision);
    }
    Ok(ExitCode::from(match decision.outcome {
        Outcome::Allow => 0,
        Outcome::Deny => 2,
        Outcome::Pending => 3,
    }))
}

type Admin = AdminClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, MaybeToken>>;

/// A bearer token, or nothing when a client certificate identifies the caller.
#[derive(Clone)]
pub struct MaybeToken(Option<BearerToken>);

impl tonic::service::Interceptor for MaybeToken {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match &mut self.0 {
            Some(token) => token.call(request),
            None => Ok(request),
        }
    }
}

async fn grants(mut admin: Admin, command: GrantsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        GrantsCommand::Create { user, session, agent, harness, actions, resource, for_, reason } => {
            let ttl = warden_monitor::duration::parse_duration(&for_)?;
            let grant = admin
                .create_grant(pb::CreateGrantRequest {
                    user,
                    session: session.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                    actions,
                    resource_scope: resource,
                    ttl_seconds: ttl.as_secs(),
                    reason,
                    harness: harness.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_grants(&[grant], json);
        }
        GrantsCommand::List { user, session } => {
            let grants = admin
                .list_grants(pb::ListGrantsRequest {
                    user: user.unwrap_or_default(),
                    session: session.unwrap_or_default(),
                })
                .await?
                .into_inner()
                .grants;
            if grants.is_empty() && !json {
                println!("no active grants");
            }
            print_grants(&grants, json);
        }
        GrantsCommand::Revoke { id } => {
            let revoked = admin.revoke_grant(pb::RevokeGrantRequest { grant_id: id }).await?.into_inner();
            if json {
                print_grants(revoked.grant.as_slice(), true);
            } else {
                println!("revoked {}", revoked.grant.map(|g| g.grant_id).unwrap_or_default());
            }
        }
    }
    Ok(())
}

fn print_grants(grants: &[pb::Grant], json: bool) {
    for grant in grants {
        let expires = timestamp_str(grant.expires_at.as_ref());
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "grant_id": grant.grant_id, "user": grant.user, "session": grant.session, "agent": grant.agent,
                    "actions": grant.actions, "resource_scope": grant.resource_scope, "expires_at": expires,
                    "reason": grant.reason, "created_by": grant.created_by, "policy": grant.policy,
                    "harness": grant.harness,
                })
            );
        } else {
            let mut who = grant.user.clone();
            if !grant.session.is_empty() {
                who.push_str(&format!(" session {}", grant.session));
            }
            if !grant.agent.is_empty() {
                who.push_str(&format!(" agent {}", grant.agent));
            }
            if !grant.harness.is_empty() {
                who.push_str(&format!(" harness {}", grant.harness));
            }
            println!(
                "{}  {who}  {} on {}  until {expires}  by {}: {}",
                grant.grant_id,
                grant.actions.join(","),
                grant.resource_scope,
                grant.created_by,
                approvals::safe(&grant.reason)
            );
        }
    }
}

async fn sessions(mut admin: Admin, command: SessionsCommand, json: bool) -> anyhow::Result<()> {
    match command {
        SessionsCommand::Show { id, user, harness } => {
            let request = pb::GetSessionRequest {
                session: id,
                user: user.unwrap_or_default(),
                harness: harness.unwrap_or_default(),
            };
            let session = admin.get_session(request).await?.into_inner();
            print_session(&session, json);
        }
        SessionsCommand::ClearLabels { id, user, harness, reason } => {
            let session = admin
                .clear_session_labels(pb::ClearSessionLabelsRequest {
                    session: id,
                    reason: reason.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    harness: harness.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_session(&session, json);
        }
        SessionsCommand::Lock { id, user, agent, reason } => {
            let response = admin
                .lock_session(pb::LockSessionRequest {
                    session: id.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                    reason: reason.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_lock(&response, json);
        }
        SessionsCommand::Unlock { id, user, agent } => {
            let response = admin
                .unlock_session(pb::UnlockSessionRequest {
                    session: id.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                    agent: agent.unwrap_or_default(),
                })
                .await?
                .into_inner();
            print_lock(&response, json);
        }
    }
    Ok(())
}

fn print_session(session: &pb::Session, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({
                "session": session.session, "user": session.user, "agent": session.agent,
                "harness": session.harness, "labels": session.labels, "locked": session.locked, "locked_reason": session.locked_reason,
            })
        );
        return;
    }
    println!(
        "session {}  user {}  agent {}  harness {}",
        approvals::safe(&session.session),
        approvals::safe(&session.user),
        approvals::safe(&session.agent),
        approvals::safe(&session.harness)
    );
    let labels = if session.labels.is_empty() { "(none)".to_owned() } else { session.labels.join(", ") };
    println!("  labels: {labels}");
    if session.locked {
        println!("  LOCKED: {}", approvals::safe(&session.locked_reason));
    }
}

fn print_lock(response: &pb::LockResponse, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({ "target": response.target, "locked": response.locked, "denied_approvals": response.denied_approvals })
        );
        return;
    }
    println!("{} {}", if response.locked { "locked" } else { "unlocked" }, response.target);
    for id in &response.denied_approvals {
        println!("  denied pending approval {id}");
    }
}

fn timestamp_str(t: Option<&prost_types::Timestamp>) -> String {
    t.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.seconds).ok())
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

fn explain_offline(
    dir: &std::path::Path,
    message: pb::AuthorizeRequest,
    labels: &[String],
) -> anyhow::Result<pb::Explanation> {
    use warden_monitor::decision::{DecisionConfig, SessionFacts, explain};
    let snapshot =
        warden_monitor::policy::PolicySnapshot::load(dir).map_err(|e| anyhow::anyhow!("{}:\n{e}", dir.display()))?;
    let input = warden_monitor::grpc::request_input(message).map_err(|e| anyhow::anyhow!("{e}"))?;
    let request = warden_monitor::normalize::normalize(&input).map_err(|e| anyhow::anyhow!("{e}"))?;
    let facts = SessionFacts {
        labels: labels.iter().cloned().collect(),
        harness: "wardenctl".into(),
        ..SessionFacts::default()
    };
    let (evaluation, traces) =
        explain(&snapshot, &request, &facts, time::OffsetDateTime::now_utc(), &DecisionConfig::default())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(warden_monitor::grpc::explanation_to_proto(String::new(), evaluation, traces))
}

fn print_explanation(explanation: &pb::Explanation, json: bool) {
    let decision = explanation.decision.clone().unwrap_or_default();
    let outcome = match pb::Outcome::try_from(decision.outcome) {
        Ok(pb::Outcome::Allow) => "ALLOW",
        Ok(pb::Outcome::Deny) => "DENY",
        Ok(pb::Outcome::Pending) => "PENDING",
        _ => "?",
    };
    if json {
        let policies: Vec<serde_json::Value> = explanation
            .policies
            .iter()
            .map(|p| {
                serde_json::json!({ "id": p.id, "effect": p.effect, "file": p.file, "matches": p.matches,
                "matches_approved": p.matches_approved, "error": p.error })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "outcome": outcome, "policy_ids": decision.policy_ids, "reasons": decision.reasons,
                "grant_ids": decision.grant_ids, "policies": policies })
        );
        return;
    }
    println!("{outcome}  (what-if: nothing was recorded)");
    for reason in &decision.reasons {
        println!("  reason: {reason}");
    }
    println!("  {:<7} {:<6} {:<9} {:<36} FILE", "MATCHES", "IF OK", "EFFECT", "POLICY");
    for p in &explanation.policies {
        let yes = |b: bool| if b { "yes" } else { "-" };
        println!("  {:<7} {:<6} {:<9} {:<36} {}", yes(p.matches), yes(p.matches_approved), p.effect, p.id, p.file);
        if !p.error.is_empty() {
            println!("          ERROR: {}", p.error);
        }
    }
}

fn print_status(status: &pb::PolicyStatusResponse, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({ "policy_version": status.policy_version, "loaded_at": timestamp_str(status.loaded_at.as_ref()),
                "files": status.files, "policies": status.policies, "error": status.error,
                "error_at": timestamp_str(status.error_at.as_ref()), "warnings": status.warnings })
        );
        return;
    }
    println!(
        "policy version {}  ({} policies, loaded {})",
        status.policy_version,
        status.policies,
        timestamp_str(status.loaded_at.as_ref())
    );
    println!("  files: {}", status.files.join(", "));
    for warning in &status.warnings {
        println!("  warning: {warning}");
    }
    if !status.error.is_empty() {
        println!(
            "  LAST RELOAD FAILED ({}), the version above keeps serving:",
            timestamp_str(status.error_at.as_ref())
        );
        for line in status.error.lines() {
            println!("    {line}");
        }
    }
}

fn policy_test(dir: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    use warden_monitor::policytest::{load_suites, run_suite};
    let snapshot = match warden_monitor::policy::PolicySnapshot::load(dir) {
        Ok(snapshot) => snapshot,
        Err(error) => {
            for diagnostic in &error.diagnostics {
                eprintln!("error: {}", diagnostic.render());
            }
            anyhow::bail!("{} does not load, so its tests cannot run", dir.display());
        }
    };
    let suites = load_suites(&dir.join("tests"))?;
    let config = warden_monitor::decision::DecisionConfig::default();
    let (mut passed, mut failed) = (0, 0);
    let mut report = Vec::new();
    for (path, suite) in &suites {
        let results = run_suite(&snapshot, suite, &config);
        let suite_failed = results.iter().filter(|r| !r.passed()).count();
        passed += results.len() - suite_failed;
        failed += suite_failed;
        if json {
            let cases: Vec<serde_json::Value> = results
                .iter()
                .map(|r| serde_json::json!({ "name": r.name, "passed": r.passed(), "failures": r.failures, "actual": r.actual }))
                .collect();
            report
                .push(serde_json::json!({ "suite": suite.suite, "file": path.display().to_string(), "cases": cases }));
            continue;
        }
        for result in results.iter().filter(|r| !r.passed()) {
            println!("FAIL {} / {}", suite.suite, result.name);
            for failure in &result.failures {
                println!("     {failure}");
            }
            println!("     got: {}", result.actual);
        }
        println!("{}: {} passed, {suite_failed} failed", suite.suite, results.len() - suite_failed);
    }
    if json {
        println!("{}", serde_json::json!({ "passed": passed, "failed": failed, "suites": report }));
    } else {
        println!("{passed} passed, {failed} failed");
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn policy_fmt(dir: &std::path::Path, check: bool) -> anyhow::Result<ExitCode> {
    let config = cedar_policy_formatter::Config { line_width: 100, indent_width: 2 };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cedar"))
        .collect();
    paths.sort();
    let mut unformatted = 0;
    for path in paths {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let pretty = cedar_policy_formatter::policies_str_to_pretty(&text, &config)
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", path.display()))?;
        if pretty != text {
            unformatted += 1;
            if check {
                println!("not formatted: {}", path.display());
            } else {
                std::fs::write(&path, pretty).with_context(|| format!("writing {}", path.display()))?;
                println!("formatted {}", path.display());
            }
        }
    }
    Ok(if check && unformatted > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn kind_of(action: &str) -> anyhow::Result<Kind> {
    Ok(match action {
        a if a.starts_with("fs.") => Kind::File,
        "exec" => Kind::Command,
        a if a.starts_with("http.") => Kind::Http,
        a if a.starts_with("secret.") => Kind::Secret,
        a if a.starts_with("tool.") => Kind::Tool,
        other => bail!("cannot tell the resource kind of action `{other}`: give --kind"),
    })
}

fn resource(kind: Kind, args: &[String]) -> anyhow::Result<pb::authorize_request::Resource> {
    use pb::authorize_request::Resource as R;
    Ok(match (kind, args) {
        (Kind::File, [path]) => R::File(pb::FileResource { path: path.clone(), cwd: String::new() }),
        (Kind::File, _) => bail!("a file action takes one PATH"),
        (Kind::Command, argv) => R::Command(pb::CommandResource { argv: argv.to_vec(), cwd: String::new() }),
        (Kind::Http, [method, url]) => R::Http(pb::HttpResource { method: method.clone(), url: url.clone() }),
        (Kind::Http, _) => bail!("an http action takes METHOD URL"),
        (Kind::Secret, [name]) => R::Secret(pb::SecretResource { name: name.clone() }),
        (Kind::Secret, _) => bail!("a secret action takes one NAME"),
        (Kind::Tool, [server, name]) => {
            R::Tool(pb::ToolResource { server: server.clone(), name: name.clone(), arguments_json: String::new() })
        }
        (Kind::Tool, [server, name, arguments]) => {
            R::Tool(pb::ToolResource { server: server.clone(), name: name.clone(), arguments_json: arguments.clone() })
        }
        (Kind::Tool, _) => bail!("a tool action takes SERVER TOOL [ARGS_JSON]"),
    })
}

fn outcome_str(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allow => "ALLOW",
        Outcome::Deny => "DENY",
        Outcome::Pending => "PENDING",
    }
}

fn print_decision(decision: &Decision) {
    println!("{}", outcome_str(decision.outcome));
    let policies = if decision.policy_ids.is_empty() { "(none)".to_owned() } else { decision.policy_ids.join(", ") };
    println!("  policies: {policies}");
    for reason in &decision.reasons {
        println!("  reason:   {reason}");
    }
    if !decision.approval_id.is_empty() {
        println!("  approval: {}", decision.approval_id);
    }
    if let Some(expires) = decision.expires_at {
        println!("  expires:  {}", rfc3339(expires));
    }
    println!("  audit:    #{}", decision.audit_seq);
    println!("  request:  {}", decision.request_id);
    println!("  policy version: {}", decision.policy_version);
}

fn decision_json(decision: &Decision) -> serde_json::Value {
    serde_json::json!({
        "request_id": decision.request_id,
        "outcome": outcome_str(decision.outcome),
        "policy_ids": decision.policy_ids,
        "reasons": decision.reasons,
        "approval_id": decision.approval_id,
        "expires_at": decision.expires_at.map(rfc3339),
        "grant_ids": decision.grant_ids,
        "policy_version": decision.policy_version,
        "audit_seq": decision.audit_seq,
        "resolved_by": decision.resolved_by,
        "note": decision.note,
    })
}

fn rfc3339(at: std::time::SystemTime) -> String {
    let at = time::OffsetDateTime::from(at);
    at.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| at.to_string())
}

fn policy_check(dir: &std::path::Path, json: bool) -> ExitCode {
    use warden_monitor::policy::PolicySnapshot;
    match PolicySnapshot::load(dir) {
        Ok(snapshot) => {
            let summary = snapshot.summary();
            if json {
                let warnings: Vec<String> = snapshot.warnings.iter().map(ToString::to_string).collect();
                println!(
                    "{}",
                    serde_json::json!({
                        "ok": true,
                        "policy_version": snapshot.version,
                        "files": snapshot.files,
                        "policies": summary.policies,
                        "permits": summary.permits,
                        "forbids": summary.forbids,
                        "by_action": summary.by_action,
                        "missing_reason": summary.missing_reason,
                        "warnings": warnings,
                    })
                );
            } else {
                for warning in &snapshot.warnings {
                    println!("warning: {}", warning.render());
                }
                println!(
                    "{}: {} policies ({} permit, {} forbid) in {} files, version {}",
                    dir.display(),
                    summary.policies,
                    summary.permits,
                    summary.forbids,
                    snapshot.files.len(),
                    snapshot.version
                );
                for (action, count) in &summary.by_action {
                    println!("  {action}: {count}");
                }
                if !summary.missing_reason.is_empty() {
                    println!("  without @reason: {}", summary.missing_reason.join(", "));
                }
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            if json {
                let errors: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
                println!("{}", serde_json::json!({ "ok": false, "errors": errors }));
            } else {
                for diagnostic in &error.diagnostics {
                    eprintln!("error: {}", diagnostic.render());
                }
                eprintln!(
                    "{}: {} error(s); the monitor would not load this folder",
                    dir.display(),
                    error.diagnostics.len()
                );
            }
            ExitCode::FAILURE
        }
    }
}

async fn audit_verify(
    connection: &Connection,
    data: Option<PathBuf>,
    checkpoint: Option<PathBuf>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use warden_monitor::store::{Head, VerifyReport};
    let saved = match &checkpoint {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
            let checkpoint: warden_monitor::checkpoint::Checkpoint =
                serde_json::from_str(line).with_context(|| format!("{} holds no checkpoint", path.display()))?;
            Some(checkpoint)
        }
        None => None,
    };
    // The report, the monitor's public key, and the hash stored at the checkpoint's record.
    let (report, public_key, hash_at) = match data {
        Some(data) => {
            let offline = warden_monitor::verify::verify_offline(&data, saved.as_ref().map(|c| c.seq))
                .map_err(|e| anyhow::anyhow!(e))?;
            (offline.report, offline.public_key, offline.hash_at)
        }
        None => {
            let mut admin = connection.admin().await?;
            let r = admin.verify_audit(pb::VerifyAuditRequest {}).await?.into_inner();
            let hash_at = match &saved {
                Some(c) if c.seq > 0 => {
                    let mut stream =
                        admin.tail_audit(pb::TailAuditRequest { all: true, ..Default::default() }).await?.into_inner();
                    let mut found = None;
                    while let Some(record) = stream.next().await {
                        let record = record?;
                        if record.seq == c.seq {
                            found = Some(record.hash);
                            break;
                        }
                    }
                    found
                }
                _ => None,
            };
            let first_bad = (!r.ok).then(|| (r.first_bad_seq, r.error.clone()));
            let report =
                VerifyReport { records: r.records, head: Head { seq: r.head_seq, hash: r.head_hash }, first_bad };
            (report, r.checkpoint.map(|c| c.public_key), hash_at)
        }
    };
    let mut ok = report.ok();
    let mut problems: Vec<String> =
        report.first_bad.iter().map(|(seq, e)| format!("BROKEN at record #{seq}: {e}")).collect();
    if let Some(saved) = &saved {
        if public_key.as_deref().is_some_and(|k| k != saved.public_key) {
            problems.push("the checkpoint was signed by another key than this monitor's".into());
        }
        if let Err(e) = warden_monitor::checkpoint::check_log(saved, &report, hash_at) {
            problems.push(format!("CHECKPOINT FAILS: {e}"));
        }
        ok &= problems.is_empty();
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "ok": ok, "records": report.records, "head_seq": report.head.seq,
                "head_hash": report.head.hash, "problems": problems })
        );
    } else if ok {
        let against = saved.map(|c| format!(", and holds checkpoint #{}", c.seq)).unwrap_or_default();
        println!("ok: {} records, head #{} {}{against}", report.records, report.head.seq, report.head.hash);
    } else {
        for problem in &problems {
            println!("{problem}");
        }
        println!("  the chain verifies up to #{} {}", report.head.seq, report.head.hash);
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn audit_tail(
    connection: &Connection,
    count: u32,
    all: bool,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut admin = connection.admin().await?;
    let mut stream = admin.tail_audit(pb::TailAuditRequest { count, all, follow }).await?.into_inner();
    while let Some(record) = stream.next().await {
        let record = record?;
        if json {
            println!("{}", audit_json(&record));
        } else {
            println!("{}", audit_line(&record));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn audit_time(record: &pb::AuditRecord) -> String {
    record
        .time
        .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t.seconds).ok())
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

fn audit_outcome(record: &pb::AuditRecord) -> &'static str {
    match pb::Outcome::try_from(record.outcome) {
        Ok(pb::Outcome::Allow) => "ALLOW",
        Ok(pb::Outcome::Deny) => "DENY",
        Ok(pb::Outcome::Pending) => "PENDING",
        _ => "",
    }
}

fn audit_line(record: &pb::AuditRecord) -> String {
    let actor = record.actor.as_ref().map(|a| format!("{}/{}/{}", a.user, a.agent, a.session)).unwrap_or_default();
    let mut line = format!(
        "#{:<6} {} {:<8} {:<7} {} {} {} by {}",
        record.seq,
        audit_time(record),
        record.kind,
        audit_outcome(record),
        actor,
        record.action,
        record.resource,
        record.caller
    );
    if !record.policy_ids.is_empty() {
        line.push_str(&format!(" [{}]", record.policy_ids.join(", ")));
    }
    // Everything in a record may come from a harness: no escape sequence or
    // direction override reaches the terminal.
    approvals::safe(&line)
}

fn audit_json(record: &pb::AuditRecord) -> serde_json::Value {
    serde_json::json!({
        "seq": record.seq,
        "time": audit_time(record),
        "kind": record.kind,
        "caller": record.caller,
        "actor": record.actor.as_ref().map(|a| serde_json::json!({"user": a.user, "agent": a.agent, "session": a.session})),
        "action": record.action,
        "resource": record.resource,
        "outcome": audit_outcome(record),
        "policy_ids": record.policy_ids,
        "reasons": record.reasons,
        "policy_version": record.policy_version,
        "request_id": record.request_id,
        "approval_id": record.approval_id,
        "prev_hash": record.prev_hash,
        "hash": record.hash,
    })
}
