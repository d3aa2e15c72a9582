//! `wardenctl`: the command line of Warden's approvers and security team.

#![forbid(unsafe_code)]

mod approvals;
mod approvers;
mod audit;
mod authorize;
mod cli;
mod connection;
mod diff;
mod format;
mod grants;
mod out;
mod policy;
mod replay;
mod sessions;

use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;
use warden_proto::v1 as pb;

use crate::audit::{audit_tail, audit_verify};
use crate::authorize::authorize;
use crate::cli::{ApprovalsCommand, AuditCommand, Cli, Command, PolicyCommand};
use crate::grants::grants;
use crate::out::outln;
use crate::policy::{policy_check, policy_fmt, policy_test, print_status};
use crate::sessions::sessions;

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
        // The reader of stdout stopped early (`| head`): said by the status.
        Err(error) if out::reader_gone(&error) => ExitCode::from(out::READER_GONE),
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
                ApprovalsCommand::Watch { notify, page } => {
                    let reopen = connection::Reopen::new(&cli.connection);
                    approvals::watch(client, notify, page, cli.json, reopen).await?
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Approvers(command) => {
            approvers::approvers(cli.connection.admin().await?, command, cli.json).await?;
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
        Command::Policy(PolicyCommand::Check { dir, require_proofs }) => {
            policy_check(&dir, require_proofs, cli.json).await
        }
        Command::Policy(PolicyCommand::Test { dir }) => policy_test(&dir, cli.json),
        Command::Policy(PolicyCommand::Fmt { dir, check }) => policy_fmt(&dir, check),
        Command::Policy(PolicyCommand::Diff { old, new, timeout, running }) => {
            // With --running, the one folder given is NEW.
            let default = || std::path::PathBuf::from("policies");
            let (old, new) = match (running, old, new) {
                (true, Some(_), Some(_)) => bail!("with --running, give only NEW"),
                (true, given, None) => (diff::running_set(&cli.connection).await?, given.unwrap_or_else(default)),
                (false, Some(old), new) => (old, new.unwrap_or_else(default)),
                (_, None, _) => bail!("give OLD, or --running"),
            };
            diff::policy_diff(&old, &new, &timeout, cli.json).await
        }
        Command::Policy(PolicyCommand::Replay { policies, log }) => {
            replay::policy_replay(&cli.connection, &policies, &log, cli.json).await
        }
        Command::Policy(PolicyCommand::Shadow { log }) => replay::policy_shadow(&cli.connection, &log, cli.json).await,
        Command::Policy(PolicyCommand::Status) => {
            let status = cli.connection.admin().await?.policy_status(pb::PolicyStatusRequest {}).await?.into_inner();
            print_status(&status, cli.json)?;
            Ok(if status.error.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Policy(PolicyCommand::Reload) => {
            let reloaded =
                cli.connection.admin().await?.reload_policies(pb::ReloadPoliciesRequest {}).await?.into_inner();
            let status = reloaded.status.unwrap_or_default();
            if !cli.json {
                outln!(
                    "{}",
                    if reloaded.loaded {
                        "reloaded"
                    } else {
                        "the folder did not load; the last good policies keep serving"
                    }
                )?;
            }
            print_status(&status, cli.json)?;
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
            outln!("{}", serde_json::to_string(&checkpoint)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Audit(AuditCommand::Export { since, until, follow, data }) => {
            audit::audit_export(&cli.connection, &since, until.as_deref(), follow, data).await
        }
        Command::Audit(AuditCommand::Tail { count, all, follow }) => {
            audit_tail(&cli.connection, count, all, follow, cli.json).await
        }
        Command::Health { service } => health(&cli.connection, service, cli.json).await,
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            // Generated whole first: clap_complete panics on a failed write.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "wardenctl", &mut script);
            out::bytes(&script)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `grpc.health.v1.Health/Check`: SERVING exits 0; anything else, or no
/// answer within 5 s, exits 1.
async fn health(connection: &connection::Connection, service: String, json: bool) -> anyhow::Result<ExitCode> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut client = tonic_health::pb::health_client::HealthClient::new(connection.replicas().await?);
    let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest { service: service.clone() });
    request.set_timeout(std::time::Duration::from_secs(5));
    let status = client.check(request).await?.into_inner().status();
    let name = status.as_str_name();
    if json {
        outln!("{}", serde_json::json!({ "service": service, "status": name }))?;
    } else {
        outln!("{name}")?;
    }
    Ok(if status == ServingStatus::Serving { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
