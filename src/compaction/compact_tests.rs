use super::*;
use crate::config::{CompactionConfig, Durability, StorageConfig};
use crate::model::{Encoding, TokenCounter};
use crate::store::{ToolInfo, TurnCommit};

fn counter() -> TokenCounter {
    TokenCounter::new(Encoding::for_model("gpt-4o"))
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(&StorageConfig {
        data_dir: dir.to_path_buf(),
        cache_capacity_bytes: 1 << 20,
        durability: Durability::Strict,
        ..StorageConfig::default()
    })
    .unwrap()
}

fn entry(kind: EntryKind, text: &str) -> TranscriptEntry {
    TranscriptEntry::new(kind, text, counter().count(text), 1)
}

fn tool(kind: EntryKind, id: &str) -> TranscriptEntry {
    let mut e = entry(kind, "tool text");
    e.tool = Some(Box::new(ToolInfo {
        call_id: id.into(),
        name: "lookup".into(),
        arguments: "{}".into(),
    }));
    e
}

fn append(store: &Store, key: &str, entries: Vec<TranscriptEntry>) {
    store
        .commit_turn(&TurnCommit {
            session_key: key.to_string(),
            entries,
            consumed: vec![],
            now_ms: 1,
            channel_messages: vec![],
            replica: None,
        })
        .unwrap();
}

/// A turn about order `n`: a long user message and an answer, each naming the order id.
fn turn(n: usize) -> Vec<TranscriptEntry> {
    let filler = "We talked about the delivery schedule and the weather in some detail. ".repeat(6);
    vec![
        entry(
            EntryKind::User,
            &format!("Please check order ORD-{n:04}. {filler}"),
        ),
        entry(
            EntryKind::Assistant,
            &format!("Order ORD-{n:04} ships tomorrow. {filler}"),
        ),
    ]
}

fn compactor(store: &Store) -> SessionCompactor {
    let summarizer = Summarizer::new(None, &CompactionConfig::default(), counter());
    SessionCompactor::new(store.clone(), summarizer)
}

#[test]
fn the_cut_never_separates_a_tool_call_from_its_result() {
    let entries: Vec<(u64, TranscriptEntry)> = [
        entry(EntryKind::User, "a"),
        tool(EntryKind::ToolCall, "1"),
        tool(EntryKind::ToolCall, "2"),
        tool(EntryKind::ToolResult, "1"),
        tool(EntryKind::ToolResult, "2"),
        entry(EntryKind::Assistant, "done"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, e)| (i as u64 + 1, e))
    .collect();
    let result_tokens = u64::from(entries[4].1.tokens + entries[5].1.tokens);
    // Keeping only the last result and the answer would orphan the result: the calls move too.
    assert_eq!(cut_point(&entries, result_tokens, usize::MAX), 1);
    assert_eq!(cut_point(&entries, u64::MAX, usize::MAX), 0);
    assert_eq!(cut_point(&entries, 0, usize::MAX), 6);
}

#[tokio::test]
async fn compaction_swaps_in_a_rolling_summary_before_the_kept_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for n in 0..20 {
        append(&store, "s", turn(n));
    }
    let before = store.session("s").unwrap().unwrap();
    let keep = 4 * u64::from(turn(0)[0].tokens);
    let c = compactor(&store);
    let outcome = c
        .compact("s", Cut::KeepRecent(keep))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.tokens_before, before.tokens);
    assert!(outcome.tokens_after < before.tokens / 2, "{outcome:?}");
    let after = store.session("s").unwrap().unwrap();
    assert_eq!(after.compaction_count, 1);
    assert_eq!(after.tokens, outcome.tokens_after);
    let transcript = store.transcript(after.id, 0, 1_000).unwrap();
    assert_eq!(after.entries, transcript.len() as u64);
    assert_eq!(transcript[0].1.kind, EntryKind::Summary);
    assert!(transcript[1..]
        .iter()
        .all(|(_, e)| e.kind != EntryKind::Summary));
    let summary = &transcript[0].1.text;
    for n in 0..16 {
        assert!(
            summary.contains(&format!("ORD-{n:04}")),
            "ORD-{n:04} kept in {summary}"
        );
    }
    assert_eq!(
        after.tokens,
        transcript
            .iter()
            .map(|(_, e)| u64::from(e.tokens))
            .sum::<u64>()
    );

    // More turns, then a second compaction rolls the first summary forward.
    for n in 20..30 {
        append(&store, "s", turn(n));
    }
    let outcome = c
        .compact("s", Cut::KeepRecent(keep))
        .await
        .unwrap()
        .unwrap();
    assert!(outcome.entries_compacted > 0);
    let after = store.session("s").unwrap().unwrap();
    assert_eq!(after.compaction_count, 2);
    let transcript = store.transcript(after.id, 0, 1_000).unwrap();
    let summaries: Vec<_> = transcript
        .iter()
        .filter(|(_, e)| e.kind == EntryKind::Summary)
        .collect();
    assert_eq!(summaries.len(), 1, "the previous summary was replaced");
    assert!(summaries[0].1.text.contains("ORD-0003") && summaries[0].1.text.contains("ORD-0020"));
}

#[tokio::test]
async fn nothing_to_cut_and_a_stale_epoch_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    append(&store, "s", turn(1));
    let c = compactor(&store);
    let keep = 1_000_000;
    let outcome = c
        .compact("s", Cut::KeepRecent(keep))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.entries_compacted, 0);
    assert_eq!(outcome.tokens_before, outcome.tokens_after);
    assert!(c
        .compact("missing", Cut::KeepRecent(keep))
        .await
        .unwrap()
        .is_none());

    let record = store.session("s").unwrap().unwrap();
    let summary = entry(EntryKind::Summary, "s");
    let stale = store
        .swap_summary(SummarySwap {
            session_key: "s",
            session_id: record.id,
            epoch: record.compaction_count + 1,
            remove: &[1],
            summary: &summary,
        })
        .unwrap();
    assert_eq!(stale, SwapOutcome::Changed);
    assert_eq!(store.session("s").unwrap().unwrap(), record);
}

#[tokio::test]
async fn a_ttl_span_is_compacted_up_to_its_last_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for n in 0..6 {
        append(&store, "s", turn(n));
    }
    append(
        &store,
        "s",
        vec![
            tool(EntryKind::ToolCall, "1"),
            tool(EntryKind::ToolResult, "1"),
        ],
    );
    append(&store, "s", turn(6));
    let c = compactor(&store);
    // Up to the call (seq 13): the cut would split it from its result, so it stays too.
    let outcome = c.compact("s", Cut::UpTo(13)).await.unwrap().unwrap();
    assert_eq!(outcome.entries_compacted, 12);
    let record = store.session("s").unwrap().unwrap();
    let transcript = store.transcript(record.id, 0, 100).unwrap();
    let kinds: Vec<EntryKind> = transcript.iter().map(|(_, e)| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Summary,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
            EntryKind::User,
            EntryKind::Assistant
        ]
    );
}
