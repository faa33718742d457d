//! `weir leases delete-ended` against ferrokinesis and SQLite leases: an ended lease
//! whose shard the stream no longer lists is deleted (conditionally); the ended parent
//! of a split, still listed by the stream, is kept with the reason; and nothing is read
//! again afterwards.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_core::ports::LeaseTable;
use weir_core::{Checkpoint, ConsumerName, LeaseChange, LeaseMutation, NewLease, ShardId, WorkerId};
use weir_e2e::{create_stream, kinesis, kinesis_batch_config, put_wave, split_shard, weir_command};
use weir_local::SqliteLeaseTable;
use weir_testkit::Emulator;

const STREAM: &str = "cleanup-events";

fn weir(args: &[&str]) -> String {
    let mut cmd = weir_command();
    cmd.args(args);
    let (out, _) = weir_e2e::timed(cmd, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "weir {args:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_leases_of_shards_the_stream_dropped_are_deleted_and_nothing_else() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, STREAM, 1).await;
    let p = Producer::new(k.clone(), STREAM);
    put_wave(&p, "before", 300).await;
    split_shard(&k, STREAM, "shardId-000000000000").await;
    put_wave(&p, "after", 300).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = kinesis_batch_config(dir.path(), &fk.endpoint, STREAM, "cleanup");
    let cfg = cfg.to_str().unwrap();
    let out = weir(&["run", "--config", cfg, "--until-caught-up"]);
    assert!(out.contains("(600 records processed)"), "{out}");

    // A shard long gone from the stream (past retention), its lease ended and free.
    let table = SqliteLeaseTable::open(dir.path().join("leases.db"), "cleanup").unwrap();
    let gone = ShardId::new("shardId-000000000099");
    table
        .create_if_absent(NewLease {
            key: gone.clone(),
            initial: Checkpoint::TrimHorizon,
            parents: vec![],
            hash_range: None,
        })
        .await
        .unwrap();
    let l = table.get(&gone).await.unwrap().unwrap();
    let l = table.mutate(&LeaseMutation::on(&l, LeaseChange::Take { owner: WorkerId::new("old") })).await.unwrap();
    let l = table
        .mutate(&LeaseMutation::on(
            &l,
            LeaseChange::Checkpoint {
                checkpoints: [(ConsumerName::new("archive"), Checkpoint::ShardEnd)].into(),
                ended_with_children: Some(vec![]),
            },
        ))
        .await
        .unwrap();
    table.mutate(&LeaseMutation::on(&l, LeaseChange::Release)).await.unwrap();
    let parent = table.get(&ShardId::new("shardId-000000000000")).await.unwrap().unwrap();
    assert!(parent.ended, "the split parent was read to its end: {parent:?}");

    let dry = weir(&["leases", "delete-ended", "--config", cfg, "--dry-run"]);
    assert!(dry.contains("shardId-000000000099: would be deleted"), "{dry}");
    assert!(dry.contains("shardId-000000000000: kept: the stream still lists the shard"), "{dry}");
    assert!(dry.contains("1 ended leases would be deleted, 1 kept"), "{dry}");
    assert!(table.get(&gone).await.unwrap().is_some(), "a dry run deletes nothing");

    let done = weir(&["leases", "delete-ended", "--config", cfg]);
    assert!(done.contains("shardId-000000000099: deleted"), "{done}");
    assert!(done.contains("1 ended leases deleted, 1 kept"), "{done}");
    assert!(table.get(&gone).await.unwrap().is_none());
    assert_eq!(table.list().await.unwrap().len(), 3, "the parent and its two children stay");

    // Nothing is read again.
    let out = weir(&["run", "--config", cfg, "--until-caught-up"]);
    assert!(out.contains("(0 records processed)"), "{out}");
}
