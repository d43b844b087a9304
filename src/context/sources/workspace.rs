//! Reading files of the agent workspace: cached by (mtime, length), so an edited file is
//! re-read on the next turn and an unchanged one costs only a `stat`.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::model::TokenCounter;

/// What identifies a version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// The stamp of `path`, or `None` if it is not a readable regular file.
pub(crate) fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    meta.is_file().then(|| FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Hashes a list of stamped paths into a fingerprint.
pub(crate) fn fingerprint<'a>(items: impl Iterator<Item = (&'a Path, Option<FileStamp>)>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (path, stamp) in items {
        path.hash(&mut h);
        stamp.hash(&mut h);
    }
    h.finish()
}

/// Reads at most `max_bytes` of `path` as text (invalid UTF-8 replaced).
pub(crate) fn read_capped(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A file's text and its tokens, as last read.
#[derive(Debug, Clone)]
pub(crate) struct CachedText {
    pub(crate) text: Arc<str>,
    pub(crate) tokens: u32,
}

/// Cached file texts. Holds at most the files its source looks at (a fixed list or a bounded
/// scan), so it is bounded by that source's own limits.
#[derive(Debug, Default)]
pub(crate) struct FileCache {
    entries: Mutex<HashMap<PathBuf, (FileStamp, CachedText)>>,
}

impl FileCache {
    /// The text of `path` made by `prepare` from its first `max_bytes`, re-read only when its
    /// stamp changed; `None` if the file is missing or unreadable (logged).
    pub(crate) fn get(
        &self,
        path: &Path,
        max_bytes: u64,
        tokens: TokenCounter,
        prepare: impl FnOnce(String) -> String,
    ) -> Option<CachedText> {
        let Some(now) = stamp(path) else {
            self.lock().remove(path);
            return None;
        };
        if let Some((s, cached)) = self.lock().get(path) {
            if *s == now {
                return Some(cached.clone());
            }
        }
        let text = match read_capped(path, max_bytes) {
            Ok(t) => prepare(t),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read workspace file");
                return None;
            }
        };
        let cached = CachedText {
            tokens: tokens.count(&text),
            text: Arc::from(text),
        };
        self.lock()
            .insert(path.to_path_buf(), (now, cached.clone()));
        Some(cached)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (FileStamp, CachedText)>> {
        // A panic while holding the lock leaves a consistent map (inserts and removes are
        // single calls), so a poisoned lock is still usable.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `path` with the home directory shown as `~` (skills list, dump).
pub(crate) fn shorten_home(path: &Path, home: Option<&Path>) -> String {
    if let Some(rest) = home.and_then(|h| path.strip_prefix(h).ok()) {
        return format!("~/{}", rest.display());
    }
    path.display().to_string()
}

/// The home directory (`$HOME`), if set.
pub(crate) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}
