//! OpenClaw import: an arbitrary transcript file next to a fixed `sessions.json` must import
//! or be reported, never panic, and leave a store the doctor finds clean.
#![no_main]

use libfuzzer_sys::fuzz_target;
use turnstile::config::StorageConfig;
use turnstile::store::{import_openclaw, Depth, Store};

fuzz_target!(|data: &[u8]| {
    let src = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        src.path().join("sessions.json"),
        r#"{"agent:main:main":{"sessionId":"s","updatedAt":1764470000000}}"#,
    )
    .expect("write index");
    std::fs::write(src.path().join("s.jsonl"), data).expect("write transcript");
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let config = StorageConfig {
            data_dir: dir.path().to_path_buf(),
            ..StorageConfig::default()
        };
        let store = Store::open(&config).expect("open");
        import_openclaw(&store, src.path(), &|t| t.len() as u32).expect("import never fails on content");
        assert!(store.doctor(Depth::Full, false).expect("doctor").is_clean());
        store.close().await.expect("close");
    });
});
