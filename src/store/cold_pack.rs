//! The cold tier's pack files: `<data_dir>/cold/pack-<n>.seg`, each an append-only sequence
//! of frames, one per cold session: `[u32 LE length][gzip member of that many bytes]`. The
//! gzip member holds the session's segment (`cold.rs`: a header, then its transcript), the
//! same bytes a per-session segment file of the old layout held, so migrating such a file
//! into a pack is a plain copy.
//!
//! Why packs: one file per session cost a 4 KiB block for ~300 bytes and put 150,000 files in
//! one directory at scale. A pack holds up to [`PACK_MAX_FRAMES`] sessions, so there is at
//! most one file per thousand cold sessions (fewer, larger sessions fill a pack by bytes
//! first: [`PACK_MAX_BYTES`]). Where each session's frame is lives in the index
//! (`cold_index.rs`), so reads need no directory walk.
//!
//! Frames are only ever appended (and synced before the index names them); a frame that is
//! no longer named by the index is dead bytes until the janitor removes or compacts its pack
//! (`cold_tidy.rs`). Only the janitor appends (freezes, migration, compaction), under the
//! writer's lock.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use flate2::write::GzEncoder;
use flate2::Compression;
use lru::LruCache;
use serde::{Deserialize, Serialize};

use super::cold::COLD_DIR;
use crate::error::StoreError;

/// A pack is sealed (the next frame starts a new pack) once it holds this many frames: with
/// the janitor compacting packs that are mostly dead, every sealed pack keeps at least a
/// thousand live sessions or half its bytes.
pub(super) const PACK_MAX_FRAMES: u64 = 4_000;
/// ...or this many bytes (a pack may pass it by its last frame). Bounds what a compaction
/// copies and what deleting the oldest pack for the budget takes at once...
pub(super) const PACK_MAX_BYTES: u64 = 32 << 20;
/// ...and never more than this share of `max_disk_bytes` (but at least [`PACK_MIN_BYTES`]):
/// the janitor deletes cold sessions for the budget a whole pack at a time, so in a small
/// budget a pack must be a small part of it (at 32 MiB, half a MiB: about as many sessions
/// at once as one file per session gave).
pub(super) const PACK_BUDGET_DIVISOR: u64 = 64;
/// The smallest pack size [`PACK_BUDGET_DIVISOR`] gives.
pub(super) const PACK_MIN_BYTES: u64 = 256 << 10;
/// Most pack files held open for reading at once; the least recently used is closed first.
/// With the writer's one file, the cold tier holds at most `MAX_OPEN_PACKS + 1` files open
/// (a reader in the middle of a frame keeps its handle until it is done).
pub(crate) const MAX_OPEN_PACKS: usize = 16;
/// Bytes of a frame's length prefix.
pub(super) const PREFIX_BYTES: u64 = 4;

const PACK_PREFIX: &str = "pack-";
const PACK_SUFFIX: &str = ".seg";

/// Where a session's frame is: its pack, the offset of its length prefix, and the length of
/// its gzip member (the bytes after the prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct FrameLoc {
    pub(super) pack: u64,
    pub(super) offset: u64,
    pub(super) length: u64,
}

impl FrameLoc {
    /// Bytes the frame takes in its pack, prefix included.
    pub(super) fn bytes(&self) -> u64 {
        PREFIX_BYTES + self.length
    }
}

/// The path of pack `n`.
pub(super) fn pack_path(data_dir: &Path, n: u64) -> PathBuf {
    data_dir
        .join(COLD_DIR)
        .join(format!("{PACK_PREFIX}{n:08}{PACK_SUFFIX}"))
}

/// The pack number of a file name, if it names a pack.
pub(super) fn pack_number(file_name: &str) -> Option<u64> {
    file_name
        .strip_prefix(PACK_PREFIX)?
        .strip_suffix(PACK_SUFFIX)?
        .parse()
        .ok()
}

/// The pack being appended to.
struct OpenPack {
    number: u64,
    file: File,
    /// Where the next frame goes (bytes written past it by a failed append are overwritten).
    len: u64,
    frames: u64,
}

/// What to append to: the pack the newest frames went to (resumed if it is not sealed), so a
/// restart does not leave a small pack behind each time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resume {
    /// The newest pack the index knows, and the frames it was given.
    pub(super) newest: Option<(u64, u64)>,
}

/// The pack files of one data dir: the writer and the bounded set of open readers.
pub(super) struct Packs {
    data_dir: PathBuf,
    writer: Mutex<Option<OpenPack>>,
    /// Open read handles by pack number, least recently used first; at most
    /// [`MAX_OPEN_PACKS`].
    readers: Mutex<LruCache<u64, Arc<File>>>,
    /// [`PACK_MAX_FRAMES`] and [`PACK_MAX_BYTES`] (tests lower them).
    max_frames: AtomicU64,
    max_bytes: AtomicU64,
}

/// The writer's lock, held while appending (and by the janitor while it deletes packs, so
/// the pack being appended to is never deleted under it).
pub(super) struct PackWriter<'a> {
    packs: &'a Packs,
    open: std::sync::MutexGuard<'a, Option<OpenPack>>,
}

impl Packs {
    /// The packs under `data_dir`, sized for a budget of `max_disk_bytes`.
    pub(super) fn new(data_dir: &Path, max_disk_bytes: u64) -> Self {
        let max_bytes =
            (max_disk_bytes / PACK_BUDGET_DIVISOR).clamp(PACK_MIN_BYTES, PACK_MAX_BYTES);
        Self {
            data_dir: data_dir.to_path_buf(),
            writer: Mutex::new(None),
            readers: Mutex::new(LruCache::new(
                NonZeroUsize::new(MAX_OPEN_PACKS).unwrap_or(NonZeroUsize::MIN),
            )),
            max_frames: AtomicU64::new(PACK_MAX_FRAMES),
            max_bytes: AtomicU64::new(max_bytes),
        }
    }

    /// Tests: seal packs after `frames` frames (or `bytes` bytes) instead.
    #[cfg(test)]
    pub(super) fn set_limits(&self, frames: u64, bytes: u64) {
        self.max_frames.store(frames, Ordering::Relaxed);
        self.max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Whether a pack with `frames` frames and `len` bytes takes no more.
    pub(super) fn sealed(&self, frames: u64, len: u64) -> bool {
        frames >= self.max_frames.load(Ordering::Relaxed)
            || len >= self.max_bytes.load(Ordering::Relaxed)
    }

    pub(super) fn writer(&self) -> PackWriter<'_> {
        PackWriter {
            packs: self,
            open: self.writer.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// A read handle on pack `n`, from the bounded set of open ones.
    pub(super) fn reader(&self, n: u64) -> Result<Arc<File>, StoreError> {
        let mut readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = readers.get(&n) {
            return Ok(Arc::clone(file));
        }
        let path = pack_path(&self.data_dir, n);
        let file = Arc::new(File::open(&path).map_err(StoreError::file("open", &path))?);
        readers.push(n, Arc::clone(&file));
        Ok(file)
    }

    /// Read handles open now (tests: the bound holds).
    #[cfg(test)]
    pub(super) fn open_readers(&self) -> usize {
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Forgets the read handle of a pack about to be deleted.
    fn forget_reader(&self, n: u64) {
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop(&n);
    }

    /// A reader of the gzip member at `loc` (its length prefix checked against the index).
    pub(super) fn frame(&self, loc: FrameLoc) -> Result<FrameReader, StoreError> {
        let file = self.reader(loc.pack)?;
        FrameReader::new(file, loc, pack_path(&self.data_dir, loc.pack))
    }

    /// The bytes of the gzip member at `loc` (a compaction copies them as they are).
    pub(super) fn frame_bytes(&self, loc: FrameLoc) -> Result<Vec<u8>, StoreError> {
        let mut out = Vec::new();
        self.frame(loc)?
            .read_to_end(&mut out)
            .map_err(StoreError::file(
                "read",
                &pack_path(&self.data_dir, loc.pack),
            ))?;
        Ok(out)
    }
}

impl PackWriter<'_> {
    /// The pack appended to now, if one is open.
    pub(super) fn current(&self) -> Option<u64> {
        self.open.as_ref().map(|p| p.number)
    }

    /// Streams one frame into the open pack (opening or starting one first; see [`Resume`]):
    /// `body` writes the segment, which is gzip-compressed on its way. Synced before it
    /// returns. A failed append leaves nothing the index names.
    pub(super) fn append(
        &mut self,
        resume: impl FnOnce() -> Result<Resume, StoreError>,
        body: impl FnOnce(&mut dyn Write) -> Result<(), StoreError>,
    ) -> Result<FrameLoc, StoreError> {
        let data_dir = self.packs.data_dir.clone();
        let pack = self.open_pack(resume)?;
        let path = pack_path(&data_dir, pack.number);
        let start = pack.len + PREFIX_BYTES;
        let mut at = At {
            file: &pack.file,
            pos: start,
        };
        {
            let mut gz = GzEncoder::new(BufWriter::new(&mut at), Compression::default());
            body(&mut gz)?;
            let buffered = gz.finish().map_err(StoreError::file("compress", &path))?;
            buffered
                .into_inner()
                .map_err(|e| StoreError::file("write", &path)(e.into_error()))?;
        }
        let length = at.pos - start;
        let loc = Self::finish_frame(pack, length, &path)?;
        pack.file
            .sync_data()
            .map_err(StoreError::file("sync", &path))?;
        Ok(loc)
    }

    /// Appends a gzip member as it is (migration, compaction); not synced: call
    /// [`PackWriter::sync`] before the index names it.
    pub(super) fn append_raw(
        &mut self,
        resume: impl FnOnce() -> Result<Resume, StoreError>,
        member: &[u8],
    ) -> Result<FrameLoc, StoreError> {
        let data_dir = self.packs.data_dir.clone();
        let pack = self.open_pack(resume)?;
        let path = pack_path(&data_dir, pack.number);
        pack.file
            .write_all_at(member, pack.len + PREFIX_BYTES)
            .map_err(StoreError::file("write", &path))?;
        Self::finish_frame(pack, member.len() as u64, &path)
    }

    /// Makes the frames appended so far durable.
    pub(super) fn sync(&mut self) -> Result<(), StoreError> {
        if let Some(pack) = self.open.as_ref() {
            let path = pack_path(&self.packs.data_dir, pack.number);
            pack.file
                .sync_data()
                .map_err(StoreError::file("sync", &path))?;
        }
        Ok(())
    }

    /// Closes the open pack, if it is `n` (it is about to be deleted).
    pub(super) fn close_if(&mut self, n: u64) {
        if self.current() == Some(n) {
            *self.open = None;
        }
    }

    /// Deletes pack `n`'s file (the caller made sure the index names none of its frames)
    /// and returns the disk bytes it held.
    pub(super) fn delete_pack(&mut self, n: u64) -> Result<u64, StoreError> {
        self.close_if(n);
        self.packs.forget_reader(n);
        let path = pack_path(&self.packs.data_dir, n);
        let bytes = std::fs::symlink_metadata(&path)
            .map(|m| super::disk::dir_disk_bytes_of_file(&m))
            .unwrap_or(0);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(StoreError::file("delete", &path)(e)),
        }
    }

    /// Writes the length prefix of the frame whose member is in place and moves the end.
    fn finish_frame(pack: &mut OpenPack, length: u64, path: &Path) -> Result<FrameLoc, StoreError> {
        let prefix = u32::try_from(length)
            .map_err(|_| StoreError::Encode(format!("a cold frame of {length} bytes")))?;
        pack.file
            .write_all_at(&prefix.to_le_bytes(), pack.len)
            .map_err(StoreError::file("write", path))?;
        let loc = FrameLoc {
            pack: pack.number,
            offset: pack.len,
            length,
        };
        pack.len += loc.bytes();
        pack.frames += 1;
        Ok(loc)
    }

    /// The pack to append to: the open one unless sealed, else the newest the index knows
    /// if it is not sealed, else a new one (numbered past every pack file there is).
    fn open_pack(
        &mut self,
        resume: impl FnOnce() -> Result<Resume, StoreError>,
    ) -> Result<&mut OpenPack, StoreError> {
        let packs = self.packs;
        if let Some(p) = self.open.as_ref() {
            if packs.sealed(p.frames, p.len) {
                *self.open = None;
            }
        }
        if self.open.is_none() {
            let dir = packs.data_dir.join(COLD_DIR);
            std::fs::create_dir_all(&dir).map_err(StoreError::file("create", &dir))?;
            let newest = resume()?.newest;
            let resumed = match newest {
                Some((n, frames)) => {
                    let path = pack_path(&packs.data_dir, n);
                    match std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                    {
                        Ok(file) => {
                            let len = file
                                .metadata()
                                .map_err(StoreError::file("measure", &path))?
                                .len();
                            (!packs.sealed(frames, len)).then_some(OpenPack {
                                number: n,
                                file,
                                len,
                                frames,
                            })
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                        Err(e) => return Err(StoreError::file("open", &path)(e)),
                    }
                }
                None => None,
            };
            let pack = match resumed {
                Some(pack) => pack,
                None => {
                    let mut n = newest.map_or(1, |(n, _)| n + 1);
                    // A pack file the index never named (a crash before its first frame was
                    // indexed) keeps its number; the janitor deletes it.
                    while pack_path(&packs.data_dir, n).exists() {
                        n += 1;
                    }
                    let path = pack_path(&packs.data_dir, n);
                    let file = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(StoreError::file("create", &path))?;
                    // The new name is durable before a frame in it is indexed.
                    File::open(&dir)
                        .and_then(|d| d.sync_all())
                        .map_err(StoreError::file("sync", &dir))?;
                    OpenPack {
                        number: n,
                        file,
                        len: 0,
                        frames: 0,
                    }
                }
            };
            *self.open = Some(pack);
        }
        self.open
            .as_mut()
            .ok_or(StoreError::Invariant("no open cold pack"))
    }
}

/// Writes at a position of a file (`pwrite`), so nothing depends on a shared cursor.
struct At<'a> {
    file: &'a File,
    pos: u64,
}

impl Write for At<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads one frame's gzip member (`pread`), so readers of one pack share its handle.
pub(super) struct FrameReader {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl FrameReader {
    fn new(file: Arc<File>, loc: FrameLoc, path: PathBuf) -> Result<Self, StoreError> {
        let mut prefix = [0u8; 4];
        file.read_exact_at(&mut prefix, loc.offset)
            .map_err(StoreError::file("read", &path))?;
        if u64::from(u32::from_le_bytes(prefix)) != loc.length {
            return Err(StoreError::Decode {
                tree: "cold",
                reason: format!(
                    "the frame at {} of {} is not the one the index names",
                    loc.offset,
                    path.display()
                ),
            });
        }
        let pos = loc.offset + PREFIX_BYTES;
        Ok(Self {
            file,
            pos,
            end: pos + loc.length,
        })
    }
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(text: &str) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap()
    }

    fn unzip(r: impl Read) -> String {
        let mut s = String::new();
        flate2::read::GzDecoder::new(r)
            .read_to_string(&mut s)
            .unwrap();
        s
    }

    #[test]
    fn frames_are_appended_read_back_and_packs_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let packs = Packs::new(dir.path(), 1 << 30);
        packs.set_limits(2, u64::MAX);
        let none = || Ok(Resume { newest: None });
        let mut w = packs.writer();
        let a = w
            .append(none, |out| {
                out.write_all(b"first")
                    .map_err(StoreError::file("write", dir.path()))
            })
            .unwrap();
        let b = w.append_raw(none, &member("second")).unwrap();
        w.sync().unwrap();
        let c = w.append_raw(none, &member("third")).unwrap();
        drop(w);
        assert_eq!(
            (a.pack, b.pack, c.pack),
            (1, 1, 2),
            "sealed after two frames"
        );
        assert_eq!(b.offset, a.bytes());
        assert_eq!(unzip(packs.frame(a).unwrap()), "first");
        assert_eq!(unzip(packs.frame(b).unwrap()), "second");
        assert_eq!(unzip(packs.frame(c).unwrap()), "third");
        let wrong = FrameLoc { length: 3, ..a };
        assert!(packs.frame(wrong).is_err(), "a stale location is an error");
        assert_eq!(pack_number("pack-00000002.seg"), Some(2));
        assert_eq!(pack_number("0123abcd.seg"), None);
    }

    #[test]
    fn a_restart_resumes_the_newest_pack_unless_it_is_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let packs = Packs::new(dir.path(), 1 << 30);
        let a = packs
            .writer()
            .append_raw(|| Ok(Resume { newest: None }), &member("a"))
            .unwrap();
        drop(packs);
        let packs = Packs::new(dir.path(), 1 << 30);
        let b = packs
            .writer()
            .append_raw(
                || {
                    Ok(Resume {
                        newest: Some((1, 1)),
                    })
                },
                &member("b"),
            )
            .unwrap();
        assert_eq!((b.pack, b.offset), (1, a.bytes()));
        drop(packs);
        let packs = Packs::new(dir.path(), 1 << 30);
        let c = packs
            .writer()
            .append_raw(
                || {
                    Ok(Resume {
                        newest: Some((1, PACK_MAX_FRAMES)),
                    })
                },
                &member("c"),
            )
            .unwrap();
        assert_eq!((c.pack, c.offset), (2, 0));
        assert_eq!(unzip(packs.frame(a).unwrap()), "a");
    }

    #[test]
    fn open_read_handles_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let packs = Packs::new(dir.path(), 1 << 30);
        packs.set_limits(1, u64::MAX);
        let mut locs = Vec::new();
        for i in 0..(MAX_OPEN_PACKS as u64 + 5) {
            let loc = packs
                .writer()
                .append_raw(|| Ok(Resume { newest: None }), &member(&i.to_string()))
                .unwrap();
            locs.push(loc);
        }
        for (i, loc) in locs.iter().enumerate() {
            assert_eq!(unzip(packs.frame(*loc).unwrap()), i.to_string());
            assert!(packs.open_readers() <= MAX_OPEN_PACKS);
        }
        assert_eq!(packs.open_readers(), MAX_OPEN_PACKS);
    }
}
