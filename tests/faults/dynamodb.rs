//! DynamoDB unreachable for one of two workers (black-holed: requests hang, as in a
//! partition): it stops processing before its leases can be taken, the other takes
//! them over, no shard ever has two owners, no checkpoint moves backwards; after the
//! link returns the first worker takes its share again and the archive is exact.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir_aws::DynamoDbLeaseTable;
use weir_core::ports::LeaseTable;
use weir_e2e::patience::{Patience, cpu_ticks, file_len};
use weir_testkit::Faults;

use crate::harness::{Env, Extra, Traffic, Worker, now_ms, outage};

/// Watches what both workers hold and every checkpoint in the table.
struct Watch {
    table: DynamoDbLeaseTable,
    checkpoints: BTreeMap<(String, String), weir_core::Checkpoint>,
    samples: u64,
}

impl Watch {
    /// One sample: no shard held by both, no checkpoint moved back.
    async fn sample(&mut self, a: &Worker, b: &Worker) -> (usize, usize) {
        let (held_a, held_b) = tokio::join!(a.held(), b.held());
        let both: Vec<&String> = held_a.iter().filter(|s| held_b.contains(s)).collect();
        assert!(
            both.is_empty(),
            "shards {both:?} held by both workers at once\n--- a:\n{}\n--- b:\n{}",
            a.log(),
            b.log()
        );
        for lease in self.table.list().await.unwrap() {
            for (consumer, cp) in lease.checkpoints {
                let k = (lease.key.to_string(), consumer.to_string());
                if let Some(before) = self.checkpoints.get(&k) {
                    assert!(before.can_advance_to(&cp), "checkpoint of {k:?} moved back: {before:?} -> {cp:?}");
                }
                self.checkpoints.insert(k, cp);
            }
        }
        self.samples += 1;
        (held_a.len(), held_b.len())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_partition_moves_leases_without_two_owners_and_loses_nothing() {
    let env = Env::new("fault-ddb", 4).await;
    let a = env.worker("ddb-a", &Extra::default()).await;
    let b = env.worker("ddb-b", &Extra::default()).await;
    a.wait_reading(Duration::from_secs(60)).await;
    b.wait_reading(Duration::from_secs(60)).await;
    let client = weir_e2e::dynamodb(&env.moto.endpoint).await;
    let table = DynamoDbLeaseTable::open(client, "fault-ddb-leases", "fault-ddb", false).await.unwrap();
    let mut watch = Watch { table, checkpoints: BTreeMap::new(), samples: 0 };
    let traffic = Traffic::start(env.kinesis.clone(), &env.name, 100);
    env.alerts.wait_for(3, Duration::from_secs(60)).await;

    let from = now_ms();
    let started = Instant::now();
    a.proxies.dynamodb.set(Faults::black_hole());
    // The link stays cut for `outage()` and until b has held all four shards: on a
    // slow machine the takeover may take longer than the outage, and the test fails
    // only when b stops making progress (or at the backstop), not on wall time.
    let mut b_took_all = false;
    let mut patience = Patience::new(Duration::from_secs(60));
    while !b_took_all || started.elapsed() < outage() {
        let (_, held_b) = watch.sample(&a, &b).await;
        if !b_took_all && held_b == 4 {
            b_took_all = true;
            println!("b held all four shards {:?} after a was cut off", started.elapsed());
        }
        if let Err(why) = patience.observe((cpu_ticks(b.pid()), file_len(&b.log))) {
            panic!("worker b never held all four shards while a was cut off: {why}:\n{}", b.log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.proxies.dynamodb.set(Faults::none());
    let to = now_ms();
    // a comes back and takes its share again (balancing), still without overlap.
    let mut patience = Patience::new(Duration::from_secs(60));
    loop {
        let (held_a, _) = watch.sample(&a, &b).await;
        if held_a > 0 {
            break;
        }
        if let Err(why) = patience.observe((cpu_ticks(a.pid()), file_len(&a.log))) {
            panic!("worker a never took a shard back: {why}:\n{}", a.log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.alerts.wait_for(env.alerts.count() + 3, Duration::from_secs(60)).await;
    let produced = traffic.stop(from, to).await;
    let tally =
        env.tally("DynamoDB unreachable for one of two workers", &produced, &[&a, &b], Duration::from_secs(120)).await;
    watch.sample(&a, &b).await;
    println!("{} samples of owners and checkpoints", watch.samples);
    tally.report_and_check(false);
}
