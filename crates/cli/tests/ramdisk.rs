//! RAM disks smaller than what a run puts on them, through `tessera run` with its filter farm:
//! a lumi section larger than the BU's RAM disk must not deadlock (the FUs keep a section's
//! inputs until they publish it, the BU holds back for its full disk). The FUs publish what they
//! hold of the section as parts, which frees the disk; the mergers take every part.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;
#[path = "common/tmpfs.rs"]
mod tmpfs;

use common::{require, tessera};
use tmpfs::Tmpfs;

#[test]
fn bu_1x1_lumi_section_larger_than_the_ramdisk_completes_in_parts_and_the_chain_holds() {
    let disk = Tmpfs::mount(8);
    let why = disk.as_ref().err().cloned().unwrap_or_default();
    if !require(&format!("a tmpfs for the BU's RAM disk: {why}"), disk.is_ok()) {
        return;
    }
    let disk = disk.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // One lumi section of 2^18 orbits (23 s) holds the whole run: 2000 events of 4 × 4 kB,
    // 33 MB, four times the 8 MB disk.
    let system = format!(
        "run: {{events: 2000, orbits_per_lumi_section: 262144}}\n\
         rus:\n  - {{name: ru0, feds: \"1024,0-3\", fragment_size: {{bytes: 4096}}}}\n\
         bus:\n  - {{name: bu0, directory: {}}}\n\
         fu: {{processes_per_bu: 1}}\n",
        disk.path().join("bu0").display()
    );
    let file = dir.path().join("system.yaml");
    std::fs::write(&file, system).unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", file.to_str().unwrap(), "--output", output.to_str().unwrap(), "--keep", "all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("chain: built 2000 = processed 2000 by the FUs = processed 2000 in storage"), "{text}");
    // The section was published in parts, each before the BU ended it, which freed the disk.
    let log = std::fs::read_to_string(output.join("fu/bu0/fu0.log")).unwrap();
    let parts = log.matches("lumi section 1 (a part, before its end) published").count();
    assert!(parts > 1, "the FU published lumi section 1 in parts ({parts}):\n{log}\n{text}");
}
