//! The `turnstile` binary: the CLI over the library. Subcommand bodies live in `cli/`; this
//! file parses and dispatches.

mod cli;

/// The server allocates many small, short-lived buffers from two threads at once; mimalloc's
/// per-thread heaps measured clearly cheaper than the system allocator on the turn path (see
/// BENCHMARKS.md). Only the binary sets it: embedders choose their own allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: allocator::Mimalloc = allocator::Mimalloc;

/// mimalloc for the binary, through its plain entry points where the layout allows.
///
/// The `mimalloc` crate's allocator passes every request to `mi_malloc_aligned`, whose fast
/// path covers only blocks up to 1 KiB that happen to sit aligned; larger ones take its
/// generic aligned path (plain calls: 0.971x the instructions of an HTTP turn, BENCHMARKS.md).
/// `mi_malloc` already returns blocks aligned to 16 bytes (and to their size below that), so
/// a layout asking no more than that needs no aligned call: the rule Rust's own `System`
/// allocator applies to `malloc`. The only unsafe code of the binary; the library forbids it.
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
mod allocator {
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    use libmimalloc_sys as ffi;

    /// The alignment every `mi_malloc` block of at least this size has (`MI_MAX_ALIGN_SIZE`
    /// on 64-bit targets).
    const PLAIN_ALIGN: usize = 16;

    /// Whether `mi_malloc`'s blocks of `size` bytes are aligned enough for `align`.
    fn plain(align: usize, size: usize) -> bool {
        align <= PLAIN_ALIGN && align <= size
    }

    pub struct Mimalloc;

    // SAFETY: every method forwards to mimalloc, which returns blocks of at least the asked
    // size (or null) aligned as `plain` states, and frees or resizes only its own blocks.
    unsafe impl GlobalAlloc for Mimalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarding; the alignment is met by `plain` or asked for explicitly.
            unsafe {
                if plain(layout.align(), layout.size()) {
                    ffi::mi_malloc(layout.size()).cast()
                } else {
                    ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: as `alloc`.
            unsafe {
                if plain(layout.align(), layout.size()) {
                    ffi::mi_zalloc(layout.size()).cast()
                } else {
                    ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
                }
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            // SAFETY: `ptr` came from this allocator, so from mimalloc.
            unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: `ptr` came from mimalloc; the new block's alignment is met as in `alloc`.
            unsafe {
                if plain(layout.align(), new_size) {
                    ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
                } else {
                    ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Every size and alignment a Rust program asks for comes back aligned, zeroed when
        /// asked, and keeps its bytes across a resize.
        #[test]
        fn blocks_are_aligned_zeroed_and_resized() {
            let a = Mimalloc;
            for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
                for size in [
                    1usize,
                    3,
                    8,
                    15,
                    16,
                    24,
                    100,
                    1024,
                    1025,
                    5000,
                    70_000,
                    1 << 20,
                ] {
                    let layout = Layout::from_size_align(size, align).expect("a valid layout");
                    // SAFETY: a non-zero size; each block is freed with its own layout.
                    unsafe {
                        let p = a.alloc(layout);
                        assert!(
                            !p.is_null() && (p as usize).is_multiple_of(align),
                            "{size}/{align}"
                        );
                        p.write_bytes(0xab, size);
                        let grown = a.realloc(p, layout, size * 3);
                        assert!(
                            !grown.is_null() && (grown as usize).is_multiple_of(align),
                            "{size}/{align}"
                        );
                        assert!((0..size).all(|i| *grown.add(i) == 0xab), "{size}/{align}");
                        let grown_layout = Layout::from_size_align(size * 3, align).expect("valid");
                        a.dealloc(grown, grown_layout);
                        let z = a.alloc_zeroed(layout);
                        assert!(
                            !z.is_null() && (z as usize).is_multiple_of(align),
                            "{size}/{align}"
                        );
                        assert!((0..size).all(|i| *z.add(i) == 0), "{size}/{align}");
                        a.dealloc(z, layout);
                    }
                }
            }
        }
    }
}

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "turnstile",
    version,
    about = "Hosts AI chat-agent sessions for many chats at once"
)]
struct Cli {
    /// Log format on stderr (`RUST_LOG` filters, default `info`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "TURNSTILE_LOG_FORMAT"
    )]
    log_format: cli::logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server.
    Serve {
        /// A turnstile.toml file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data directory (overrides the file). Default ./turnstile-data.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Listen address (overrides the file). Default 127.0.0.1:7878.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Serve a store whose ledger shows lost data (what is left), re-baselining the
        /// ledger; without it such a store is refused.
        #[arg(long)]
        accept_data_loss: bool,
    },
    /// Bounded load against a server (or an in-process runtime), with a latency report.
    Loadtest(cli::loadtest::LoadtestArgs),
    /// Check the store under a data dir (the server must not be running on it): schema,
    /// undecodable values, the inbox, the eviction index, orphan entries, counters. Exits 1
    /// when problems were found and not repaired.
    Doctor {
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
        /// Repair what is found: quarantine undecodable values, rebuild the index, delete
        /// orphan entries, recompute counters.
        #[arg(long)]
        repair: bool,
    },
    /// Import sessions from another system into a data dir (the server must not be running
    /// on it).
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Write one session as JSONL (a header line, then one line per transcript entry).
    Export {
        /// The session key.
        key: String,
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write a consistent snapshot of a running server (`--url`) or of a stopped one's data
    /// dir (`--data-dir`) to a file, with a checksum.
    Backup(cli::backup::BackupArgs),
    /// Rebuild a data dir (absent or empty) from a backup file, then check it as `doctor` does.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// The data dir to create; refused if it holds anything.
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Chat interactively with a running server.
    Chat {
        /// The server's base URL.
        #[arg(long, default_value = "http://127.0.0.1:7878")]
        url: String,
        /// The session to talk in.
        #[arg(long, default_value = "cli")]
        session: String,
    },
    /// Figures of a server or data dir: sessions, context tokens, compactions, disk use…
    Stats(cli::Target),
    /// Inspect and manage sessions.
    Sessions {
        #[command(subcommand)]
        command: cli::ops::SessionsCmd,
    },
    /// Inspect a cluster of nodes on NATS JetStream (a build with the `cluster` feature).
    #[cfg(feature = "cluster")]
    Cluster {
        #[command(subcommand)]
        command: cli::cluster::ClusterCmd,
    },
}

#[derive(Subcommand)]
enum ImportSource {
    /// An OpenClaw sessions dir (`sessions.json` and `<sessionId>.jsonl` transcripts).
    Openclaw {
        /// The sessions dir, e.g. ~/.openclaw/agents/main/sessions.
        dir: PathBuf,
        /// Data directory. Default ./turnstile-data.
        #[arg(long, default_value = "./turnstile-data")]
        data_dir: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    cli::logging::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    match cli.command {
        Command::Serve {
            config,
            data_dir,
            listen,
            accept_data_loss,
        } => runtime.block_on(cli::serve::serve(
            config,
            data_dir,
            listen,
            accept_data_loss,
        )),
        Command::Chat { url, session } => runtime.block_on(cli::chat::chat(url, session)),
        Command::Loadtest(args) => runtime.block_on(cli::loadtest::loadtest(args)),
        Command::Backup(args) => runtime.block_on(cli::backup::backup(args)),
        Command::Restore { from, data_dir } => {
            runtime.block_on(cli::backup::restore(from, data_dir))
        }
        Command::Stats(target) => runtime.block_on(cli::ops::stats(target)),
        Command::Sessions { command } => runtime.block_on(cli::ops::sessions(command)),
        #[cfg(feature = "cluster")]
        Command::Cluster { command } => runtime.block_on(cli::cluster::cluster(command)),
        Command::Doctor { data_dir, repair } => {
            runtime.block_on(cli::doctor::doctor(data_dir, repair))
        }
        Command::Import {
            source: ImportSource::Openclaw { dir, data_dir },
        } => runtime.block_on(cli::data::import_openclaw(dir, data_dir)),
        Command::Export { key, data_dir, out } => {
            runtime.block_on(cli::data::export(key, data_dir, out))
        }
    }
}
