//! Nothing acknowledged is lost across `kill -9` (SPEC §11): the real binary is killed while
//! requests are in flight, restarted on the same data dir, and must answer every message it
//! acknowledged, in order, each exactly once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{data_dir, spawn_binary, wait_all_answered, Load};

/// Sessions under load, one sequential sender each.
const SENDERS: usize = 8;
/// Kill/restart cycles.
const CYCLES: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9() {
    let dir = data_dir();
    // Every id acknowledged so far, per session, in send order.
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cycle in 0..CYCLES {
        let mut server = spawn_binary(dir.path()).await;
        // What the previous incarnation acknowledged was replayed and answered.
        let so_far: Vec<(String, Vec<String>)> = acked.clone().into_iter().collect();
        wait_all_answered(&server, &so_far).await;

        let load = Load::start(&server, SENDERS, &format!("c{cycle}"));
        load.wait_for_acks(3 * SENDERS).await;
        // Let the load run a little longer so the kill lands among requests in flight.
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.kill9();
        for (key, ids) in load.finish().await {
            acked.entry(key).or_default().extend(ids);
        }
    }

    let server = spawn_binary(dir.path()).await;
    let all: Vec<(String, Vec<String>)> = acked.into_iter().collect();
    assert_eq!(all.len(), SENDERS);
    wait_all_answered(&server, &all).await;
}
