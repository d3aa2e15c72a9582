//! Retention on PostgreSQL: the oldest records leave the database (archived
//! or deleted), each range closed by a checkpoint signed with the key every
//! replica shares, and what remains verifies on every replica; a range is
//! removed once however many replicas retain; records deleted by hand are
//! still found.

use super::*;

/// A checkpoint key (hex), the same file for every replica of a test.
fn shared_key() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut bytes).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}\n")
}

/// The smallest log retention allows (two 64 KiB segments' worth), and an
/// archive folder when given.
fn retaining(cluster: &PgCluster, audit: &str) -> String {
    format!("{}[audit]\n{audit}\n", warden_tests::replicas::config(&cluster.url()))
}

/// A replica with `config` and `key` as its checkpoint key.
fn start_keyed(wardend: &Path, config: &str, key: &str) -> Replica {
    Replica::start_seeded(wardend, &bundled(), config, &[], &[("checkpoint.key", key.as_bytes())]).unwrap()
}

/// `count` reads, spread over `clients` and eight sessions at a time.
async fn decide_many(clients: &[Client], count: usize) {
    let mut tasks = Vec::new();
    for n in 0..count {
        let client = clients[n % clients.len()].clone();
        tasks.push(tokio::spawn(async move {
            let agent = Actor::new("alice", "claude-code", format!("retained-{}", n % 8));
            let read = ActionRequest::read_file(format!("/home/alice/project/src/file-{n}.rs"));
            assert_eq!(client.authorize(&agent, read).await.unwrap().outcome, Outcome::Allow);
        }));
        if tasks.len() == 16 {
            for task in tasks.drain(..) {
                task.await.unwrap();
            }
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
}

fn oldest(cluster: &PgCluster) -> u64 {
    cluster.psql("SELECT min(seq) FROM warden_audit").unwrap().trim().parse().unwrap()
}

/// The ranges in the archive folders' finished files, by their names.
fn archived_ranges(archives: &[tempfile::TempDir]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for archive in archives {
        for entry in std::fs::read_dir(archive.path()).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let Some(range) = name.strip_prefix("audit-").and_then(|n| n.strip_suffix(".jsonl")) else { continue };
            let Some((first, last)) = range.split_once('-') else { continue };
            out.push((first.parse().unwrap(), last.parse().unwrap()));
        }
    }
    out.sort_unstable();
    out
}

/// The removals the log records, by first record: (first, last, why).
fn removals(records: &[pb::AuditRecord]) -> Vec<(u64, u64, String)> {
    let mut found: Vec<(u64, u64, String)> = records
        .iter()
        .filter(|r| r.kind == "audit.segment-removed")
        .map(|r| {
            let request: serde_json::Value = serde_json::from_str(&r.request).unwrap();
            (
                request["first_seq"].as_u64().unwrap(),
                request["last_seq"].as_u64().unwrap(),
                request["why"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_retaining_remove_each_old_record_once_and_both_verify_what_remains() {
    let Some((cluster, wardend)) =
        setup("two_replicas_retaining_remove_each_old_record_once_and_both_verify_what_remains")
    else {
        return;
    };
    let key = shared_key();
    let archives = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let monitors: Vec<Replica> = archives
        .iter()
        .map(|archive| {
            let audit = format!(
                "segment_bytes = 65536\nretain_bytes = 131072\narchive_dir = {}",
                serde_json::Value::from(archive.path().to_str().unwrap())
            );
            start_keyed(&wardend, &retaining(&cluster, &audit), &key)
        })
        .collect();
    let clients = [harness(&monitors[0].endpoint).await, harness(&monitors[1].endpoint).await];
    decide_many(&clients, 600).await;

    // Both retain every 10 s; the log is far over 128 KiB, so the oldest
    // records go, in ranges, until it is not.
    eventually("the oldest records leave the database", async || (oldest(&cluster) > 300).then_some(())).await;
    // Until retention has nothing more to do (the load is over): the log as
    // read through B, and the ranges it says were removed.
    // The archives hold every range removed; the removal records of the
    // oldest ranges may themselves have left the log since.
    let (taken, archived) = eventually("retention settles", async || {
        let records = audit(&monitors[1].endpoint).await;
        let archived = archived_ranges(&archives);
        let next = archived.last().map_or(1, |(_, last)| last + 1);
        let settled = oldest(&cluster) == next && records.first().is_some_and(|r| r.seq == next);
        settled.then_some((removals(&records), archived))
    })
    .await;
    // Each record removed once, from record 1 on, without a gap, whichever
    // replica removed it; what is left starts right after.
    let mut next = 1;
    for (first, last) in &archived {
        assert_eq!(*first, next, "{archived:?}");
        assert!(last >= first);
        next = last + 1;
    }
    let left = next;
    // Every removal the log still records is one of them.
    assert!(!taken.is_empty());
    for (first, last, why) in &taken {
        assert!(archived.contains(&(*first, *last)), "{taken:?} {archived:?}");
        assert_eq!(why, "over retain_bytes");
    }
    // What remains is about the bound (the size the monitor estimates from
    // the newest thousand rows, so within a record or two of it).
    let size: u64 =
        cluster.psql("SELECT sum(pg_column_size(a.*)) FROM warden_audit a").unwrap().trim().parse().unwrap();
    assert!(size < 131_072 + 8 * 1024, "{size} bytes left in the database");

    // Every range is in one archive, whole and linked, named by its records;
    // none is there twice, and no archive of a removal that did not happen.
    let mut archived_checked = Vec::new();
    for archive in &archives {
        for entry in std::fs::read_dir(archive.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            assert!(name.ends_with(".jsonl"), "{name} is left in the archive");
            let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect();
            let seqs: Vec<u64> = lines.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
            let (first, last) = (seqs[0], *seqs.last().unwrap());
            assert_eq!(seqs, (first..=last).collect::<Vec<_>>(), "{name}");
            assert_eq!(name, format!("audit-{first:020}-{last:020}.jsonl"));
            for pair in lines.windows(2) {
                assert_eq!(pair[1]["prev_hash"], pair[0]["hash"], "{name}: the archive's records link");
            }
            archived_checked.push((first, last));
        }
    }
    archived_checked.sort_unstable();
    assert_eq!(archived_checked, archived, "each range removed is archived once");

    // Both replicas verify the rest: it starts after a removal signed by the
    // shared key and closed by a checkpoint either of them signed.
    for monitor in &monitors {
        let report = verify(&monitor.endpoint).await;
        assert!(report.ok, "{report:?}");
        assert!(report.head_seq >= left);
    }

    // Rows deleted by hand are not a removal: named, on both.
    cluster.psql(&format!("DELETE FROM warden_audit WHERE seq <= {}", left + 2)).unwrap();
    for monitor in &monitors {
        let report = verify(&monitor.endpoint).await;
        assert!(!report.ok);
        assert!(
            report.error.contains(&format!("the log starts after record {}", left + 2))
                && report.error.contains("records were removed"),
            "{report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_older_than_retain_days_leave_and_newer_ones_stay() {
    let Some((cluster, wardend)) = setup("records_older_than_retain_days_leave_and_newer_ones_stay") else { return };
    let monitor = start_keyed(&wardend, &retaining(&cluster, "retain_days = 1"), &shared_key());
    let client = harness(&monitor.endpoint).await;
    decide_many(std::slice::from_ref(&client), 60).await;
    // The first forty records as if two days old (the row's time column,
    // which retention reads; the records themselves are unchanged).
    cluster.psql("UPDATE warden_audit SET time_unix_ns = time_unix_ns - 172800000000000 WHERE seq <= 40").unwrap();
    eventually("the records older than a day leave", async || (oldest(&cluster) == 41).then_some(())).await;
    let records = audit(&monitor.endpoint).await;
    assert_eq!(removals(&records), [(1, 40, "older than retain_days".to_owned())]);
    assert!(records.iter().any(|r| r.seq == 60), "newer records stay");
    let report = verify(&monitor.endpoint).await;
    assert!(report.ok, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_with_another_checkpoint_key_stops_retention_and_says_why() {
    let Some((cluster, wardend)) = setup("a_replica_with_another_checkpoint_key_stops_retention_and_says_why") else {
        return;
    };
    // B, which keeps everything but verifies with a key of its own, first.
    let other = Replica::start(&wardend, &bundled(), &cluster.url()).unwrap();
    let config = retaining(&cluster, "segment_bytes = 65536\nretain_bytes = 131072");
    let retainer = start_keyed(&wardend, &config, &shared_key());
    decide_many(&[harness(&retainer.endpoint).await, harness(&other.endpoint).await], 300).await;
    eventually("the retaining replica says why it removes nothing", async || {
        retainer.stderr().contains("sign with another checkpoint key").then_some(())
    })
    .await;
    assert_eq!(oldest(&cluster), 1, "nothing was removed");
    for monitor in [&retainer, &other] {
        assert!(verify(&monitor.endpoint).await.ok);
    }
}
