//! The cold tier's index: the sled tree `cold`, in the same database (and generation) as
//! the sessions, so a freeze, a thaw and a delete change a session's place and its index
//! entry in one transaction. Three kinds of keys:
//!
//! * `s` + session key → [`ColdEntry`]: where the session's frame is, and its record (the
//!   listing, a `GET` of the session and a delete need nothing else);
//! * `f` + pack (u64 BE) + offset (u64 BE) → session key: a pack's live frames in order, for
//!   the janitor (compaction, deleting a whole pack) without reading the pack;
//! * `p` + pack (u64 BE) → [`PackInfo`]: what is live in a pack, so the janitor finds empty
//!   and mostly dead packs without a walk over the sessions.
//!
//! Every change goes through [`tx_insert`] and [`tx_remove`], which keep the three in step.

use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionalTree};

use super::cold_pack::FrameLoc;
use super::{decode, encode, SessionRecord};
use crate::error::StoreError;

/// The index's tree.
pub(super) const TREE: &str = "cold";

const SESSION: u8 = b's';
const FRAME: u8 = b'f';
const PACK: u8 = b'p';

/// Most packs listed at once (the janitor's view of the tier): at 4,000 sessions a pack,
/// far more than a data dir holds.
pub(super) const MAX_PACKS_LISTED: usize = 100_000;

/// A cold session: where its frame is and its record as it was frozen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ColdEntry {
    pub(super) loc: FrameLoc,
    pub(super) record: SessionRecord,
}

/// What a pack holds for the index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PackInfo {
    /// Frames ever indexed in it (when it is sealed, see `cold_pack.rs`).
    pub(super) frames: u64,
    /// Frames the index names now.
    pub(super) live_sessions: u64,
    /// Their bytes, prefixes included.
    pub(super) live_bytes: u64,
}

type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

fn session_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(SESSION);
    k.extend_from_slice(key.as_bytes());
    k
}

fn frame_key(loc: &FrameLoc) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = FRAME;
    k[1..9].copy_from_slice(&loc.pack.to_be_bytes());
    k[9..].copy_from_slice(&loc.offset.to_be_bytes());
    k
}

fn pack_key(n: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = PACK;
    k[1..].copy_from_slice(&n.to_be_bytes());
    k
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// Session `key`'s entry.
pub(super) fn get(tree: &sled::Tree, key: &str) -> Result<Option<ColdEntry>, StoreError> {
    tree.get(session_key(key))
        .map_err(StoreError::sled("reading the cold index"))?
        .map(|v| decode("cold", &v))
        .transpose()
}

/// Session `key`'s entry, in a transaction.
pub(super) fn tx_get(tx: &TransactionalTree, key: &str) -> TxResult<Option<ColdEntry>> {
    match tx.get(session_key(key))? {
        Some(v) => Ok(Some(
            decode("cold", &v).map_err(ConflictableTransactionError::Abort)?,
        )),
        None => Ok(None),
    }
}

/// Names `entry` as session `key`'s frame (the one it replaces, if any, becomes dead).
pub(super) fn tx_insert(tx: &TransactionalTree, key: &str, entry: &ColdEntry) -> TxResult<()> {
    tx_remove(tx, key)?;
    let value = encode(entry).map_err(ConflictableTransactionError::Abort)?;
    tx.insert(session_key(key), value)?;
    tx.insert(frame_key(&entry.loc).to_vec(), key.as_bytes())?;
    let mut info = tx_pack(tx, entry.loc.pack)?;
    info.frames += 1;
    info.live_sessions += 1;
    info.live_bytes += entry.loc.bytes();
    tx_set_pack(tx, entry.loc.pack, &info)
}

/// Removes session `key`'s entry, if any (its frame becomes dead), and returns it.
pub(super) fn tx_remove(tx: &TransactionalTree, key: &str) -> TxResult<Option<ColdEntry>> {
    let Some(old) = tx_get(tx, key)? else {
        return Ok(None);
    };
    tx.remove(session_key(key))?;
    tx.remove(frame_key(&old.loc).to_vec())?;
    let mut info = tx_pack(tx, old.loc.pack)?;
    info.live_sessions = info.live_sessions.saturating_sub(1);
    info.live_bytes = info.live_bytes.saturating_sub(old.loc.bytes());
    tx_set_pack(tx, old.loc.pack, &info)?;
    Ok(Some(old))
}

fn tx_pack(tx: &TransactionalTree, n: u64) -> TxResult<PackInfo> {
    match tx.get(pack_key(n))? {
        Some(v) => decode("cold", &v).map_err(ConflictableTransactionError::Abort),
        None => Ok(PackInfo::default()),
    }
}

fn tx_set_pack(tx: &TransactionalTree, n: u64, info: &PackInfo) -> TxResult<()> {
    let value = encode(info).map_err(ConflictableTransactionError::Abort)?;
    tx.insert(pack_key(n).to_vec(), value)?;
    Ok(())
}

/// Forgets pack `n` (deleted; the index names none of its frames any more).
pub(super) fn forget_pack(tree: &sled::Tree, n: u64) -> Result<(), StoreError> {
    tree.remove(pack_key(n))
        .map_err(StoreError::sled("writing the cold index"))?;
    Ok(())
}

/// Pack `n`'s counts, if the index knows it.
pub(super) fn pack_info(tree: &sled::Tree, n: u64) -> Result<Option<PackInfo>, StoreError> {
    tree.get(pack_key(n))
        .map_err(StoreError::sled("reading the cold index"))?
        .map(|v| decode("cold", &v))
        .transpose()
}

/// Every pack the index knows, oldest (lowest number) first, at most [`MAX_PACKS_LISTED`].
pub(super) fn packs(tree: &sled::Tree) -> Result<Vec<(u64, PackInfo)>, StoreError> {
    let mut out = Vec::new();
    for kv in tree.scan_prefix([PACK]).take(MAX_PACKS_LISTED) {
        let (k, v) = kv.map_err(StoreError::sled("reading the cold index"))?;
        let Some(n) = be_u64(&k[1..]) else { continue };
        out.push((n, decode("cold", &v)?));
    }
    Ok(out)
}

/// The newest pack the index knows, and the frames it was given.
pub(super) fn newest_pack(tree: &sled::Tree) -> Result<Option<(u64, u64)>, StoreError> {
    let Some(kv) = tree.scan_prefix([PACK]).next_back() else {
        return Ok(None);
    };
    let (k, v) = kv.map_err(StoreError::sled("reading the cold index"))?;
    let info: PackInfo = decode("cold", &v)?;
    Ok(be_u64(&k[1..]).map(|n| (n, info.frames)))
}

/// The live frames of pack `n` in pack order: (offset, session key). Bounded by the frames a
/// pack takes.
pub(super) fn frames_of(tree: &sled::Tree, n: u64) -> Result<Vec<(u64, String)>, StoreError> {
    let mut prefix = [0u8; 9];
    prefix[0] = FRAME;
    prefix[1..].copy_from_slice(&n.to_be_bytes());
    let mut out = Vec::new();
    for kv in tree.scan_prefix(prefix) {
        let (k, v) = kv.map_err(StoreError::sled("reading the cold index"))?;
        let Some(offset) = k.get(9..).and_then(be_u64) else {
            continue;
        };
        out.push((offset, String::from_utf8_lossy(&v).into_owned()));
    }
    Ok(out)
}

/// Cold sessions in key order after `after` (from the start without), lazily: a page reads
/// only the entries it shows.
pub(super) fn sessions_after<'a>(
    tree: &'a sled::Tree,
    after: Option<&str>,
) -> impl Iterator<Item = Result<(String, ColdEntry), StoreError>> + 'a {
    let start = match after {
        Some(a) => std::ops::Bound::Excluded(session_key(a)),
        None => std::ops::Bound::Included(vec![SESSION]),
    };
    tree.range((start, std::ops::Bound::Excluded(vec![SESSION + 1])))
        .map(|kv| {
            let (k, v) = kv.map_err(StoreError::sled("listing cold sessions"))?;
            let key = String::from_utf8_lossy(&k[1..]).into_owned();
            Ok((key, decode("cold", &v)?))
        })
}

/// Whether the index names any cold session.
pub(super) fn is_empty(tree: &sled::Tree) -> bool {
    tree.scan_prefix([SESSION]).next().is_none()
}

#[cfg(test)]
mod tests {
    use sled::Transactional;

    use super::*;

    fn entry(pack: u64, offset: u64, length: u64) -> ColdEntry {
        ColdEntry {
            loc: FrameLoc {
                pack,
                offset,
                length,
            },
            record: SessionRecord {
                id: pack,
                created_at_ms: 0,
                updated_at_ms: offset,
                next_seq: 1,
                entries: 0,
                tokens: 0,
                bytes: length,
                compaction_count: 0,
            },
        }
    }

    fn apply(tree: &sled::Tree, f: impl Fn(&TransactionalTree) -> TxResult<()>) {
        let r: Result<(), sled::transaction::TransactionError<StoreError>> =
            (tree,).transaction(|(t,)| f(t));
        r.unwrap();
    }

    #[test]
    fn the_three_kinds_of_keys_stay_in_step() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree(TREE).unwrap();
        apply(&tree, |t| tx_insert(t, "a", &entry(1, 0, 10)));
        apply(&tree, |t| tx_insert(t, "b", &entry(1, 14, 20)));
        apply(&tree, |t| tx_insert(t, "c", &entry(2, 0, 6)));
        assert_eq!(get(&tree, "a").unwrap(), Some(entry(1, 0, 10)));
        let info = |n| packs(&tree).unwrap().into_iter().find(|(p, _)| *p == n);
        assert_eq!(
            info(1),
            Some((
                1,
                PackInfo {
                    frames: 2,
                    live_sessions: 2,
                    live_bytes: 38
                }
            ))
        );
        assert_eq!(newest_pack(&tree).unwrap(), Some((2, 1)));
        // Frozen again: the old frame is dead.
        apply(&tree, |t| tx_insert(t, "a", &entry(2, 10, 4)));
        assert_eq!(frames_of(&tree, 1).unwrap(), [(14, "b".to_string())]);
        assert_eq!(info(1).unwrap().1.live_sessions, 1);
        apply(&tree, |t| tx_remove(t, "b").map(|_| ()));
        assert_eq!(
            info(1).unwrap().1,
            PackInfo {
                frames: 2,
                live_sessions: 0,
                live_bytes: 0
            }
        );
        let listed: Vec<String> = sessions_after(&tree, None).map(|r| r.unwrap().0).collect();
        assert_eq!(listed, ["a", "c"]);
        let listed: Vec<String> = sessions_after(&tree, Some("a"))
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(listed, ["c"]);
        assert!(!is_empty(&tree));
    }
}
