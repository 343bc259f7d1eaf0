//! BU run-directory and filter-farm names: `BuFileName`, `StreamFileName`, `FuLock`,
//! `ClaimedRawName` and `parse_run_dir_name` on the input as UTF-8 (lossy). A name that parses
//! must print back (`Display`) to a name that parses to the same value; the names documented to
//! have one spelling must print back to the input itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_formats::names::{BuFileName, ClaimedRawName, FuLock, StreamFileName, parse_run_dir_name, run_dir_name};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let name = text.as_ref();

    if let Ok(n) = BuFileName::parse(name) {
        let shown = n.to_string();
        assert_eq!(BuFileName::parse(&shown).expect("Display of a BU name parses"), n);
        assert_eq!(shown, name, "a BU name has one spelling");
        assert_eq!(format!("{}.{}", n.stem(), n.extension()), shown);
        assert_eq!(n.run(), parse_run_dir_name(&run_dir_name(n.run())).unwrap());
        if let Some(json) = n.index_json() {
            assert_eq!(json.raw(), n.raw());
            assert_eq!(BuFileName::parse(&json.to_string()).unwrap(), json);
        }
        assert!(n.ls() != 0 || matches!(n, BuFileName::EndOfRun { .. }));
    }

    if let Ok(n) = StreamFileName::parse(name) {
        let shown = n.to_string();
        assert_eq!(StreamFileName::parse(&shown).expect("Display of a stream name parses"), n);
        assert_eq!(shown, name, "a stream file name has one spelling");
    }

    if let Ok(lock) = FuLock::parse(name) {
        let shown = lock.to_string();
        assert_eq!(FuLock::parse(&shown).expect("Display of fu.lock parses"), lock);
        assert_eq!(FuLock::parse(&format!("{shown}\n")).unwrap(), lock);
        let raw = lock.raw_file(1);
        assert_eq!((raw.ls(), raw.run()), (lock.next_ls, 1));
    }

    if let Ok(n) = ClaimedRawName::parse(name) {
        let shown = n.to_string();
        assert_eq!(ClaimedRawName::parse(&shown).expect("Display of a claimed name parses"), n);
        assert_eq!(ClaimedRawName::parse(&n.path()).expect("a claimed path parses"), n);
        assert_eq!(shown, name.strip_prefix("fu/").unwrap_or(name), "a claimed name has one spelling");
        let raw = n.raw();
        assert_eq!((raw.run(), raw.ls()), (n.run, n.ls));
    }

    if let Ok(run) = parse_run_dir_name(name) {
        let shown = run_dir_name(run);
        assert_eq!(parse_run_dir_name(&shown).expect("a run directory name parses"), run);
        assert_eq!(shown, name, "a run directory name has one spelling");
    }
});
