//! Source-record backup (`S3BackupMode = Enabled`): beside the transformed archive,
//! every record as it came goes to the backup's prefix with the backup's own
//! compression and buffering, each exactly once, through `weir run` on ferrokinesis.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::time::Duration;

use weir_aws::kinesis::producer::Producer;
use weir_e2e::{create_stream, files, kinesis, put_wave, session_ids, tenant_archiver_toml, weir_command, worker_toml};
use weir_testkit::Emulator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_records_are_backed_up_exactly_once_in_their_own_format() {
    let fk = Emulator::start("ferrokinesis", &[]);
    let k = kinesis(&fk.endpoint).await;
    create_stream(&k, "backup-events", 2).await;
    let p = Producer::new(k.clone(), "backup-events");
    put_wave(&p, "first", 1_000).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let archiver = tenant_archiver_toml(&out)
        .replace("CompressionFormat = \"GZIP\"\n", "CompressionFormat = \"GZIP\"\nS3BackupMode = \"Enabled\"\n")
        + "[consumers.destination.S3BackupConfiguration]\n\
           BucketARN = \"arn:aws:s3:::ignored-for-a-directory\"\n\
           Prefix = \"source/\"\nErrorOutputPrefix = \"source-errors/\"\nCompressionFormat = \"ZIP\"\n\
           BufferingHints = { SizeInMBs = 1, IntervalInSeconds = 60 }\n";
    let cfg = dir.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "{worker}\n[stream]\nkind = \"kinesis\"\nname = \"backup-events\"\n[leases]\npath = \"{leases}\"\n\
             [aws]\nkinesis_endpoint_url = \"{kinesis}\"\n[http]\nlisten = \"\"\n{archiver}",
            worker = worker_toml(None),
            leases = dir.path().join("leases.db").display(),
            kinesis = fk.endpoint,
        ),
    )
    .unwrap();

    // `config check` lists the backup consumer the section adds.
    let mut check = weir_command();
    check.args(["config", "check", cfg.to_str().unwrap()]);
    let (o, _) = weir_e2e::timed(check, Duration::from_secs(30));
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{text}");
    assert!(text.contains("archive-backup"), "{text}");

    for (wave, total) in [("first", 1_000usize), ("second", 1_500)] {
        if wave == "second" {
            put_wave(&p, "second", 500).await;
        }
        let mut run = weir_command();
        run.args(["run", "--config", cfg.to_str().unwrap(), "--until-caught-up"]);
        let (o, _) = weir_e2e::timed(run, Duration::from_secs(60));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

        // The archive: transformed records.
        let archived = session_ids(&out);
        assert_eq!(archived.len(), total, "{wave}: every record archived");
        // The backup: the records as they came (no delimiter added, as Firehose's
        // backup), under its own prefix, ZIP, named after the backup consumer.
        let backup = files(&out.join("source"));
        assert!(!backup.is_empty());
        let mut ids: BTreeMap<String, usize> = BTreeMap::new();
        for f in &backup {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.starts_with("archive-backup-1-") && name.ends_with(".zip"), "{name}");
            let body = std::fs::read(f).unwrap();
            let raw =
                weir_core::object_format::decode(weir_core::object_format::ObjectFormat::Zip, &body, u64::MAX).unwrap();
            for v in serde_json::Deserializer::from_slice(&raw).into_iter::<serde_json::Value>() {
                let v = v.unwrap();
                assert!(v.get("tenant_id").is_none(), "source records, not transformed ones: {v}");
                *ids.entry(v["sessionId"].as_str().unwrap().to_owned()).or_default() += 1;
            }
        }
        assert_eq!(ids.len(), total, "{wave}: every source record backed up");
        assert!(ids.values().all(|n| *n == 1), "{wave}: each exactly once");
        assert!(!out.join("source-errors").exists());
    }
}
