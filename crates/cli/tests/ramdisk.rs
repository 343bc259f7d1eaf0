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

/// A tmpfs of `megabytes` MB for the BU's RAM disk, or `None` when none can be mounted (not
/// root): then the test passes locally and fails under CI, saying why.
fn ram_disk(megabytes: u64) -> Option<Tmpfs> {
    let disk = Tmpfs::mount(megabytes);
    let why = disk.as_ref().err().cloned().unwrap_or_default();
    require(&format!("a tmpfs for the BU's RAM disk: {why}"), disk.is_ok()).then(|| disk.ok()).flatten()
}

#[test]
fn bu_1x1_lumi_section_larger_than_the_ramdisk_completes_in_parts_and_the_chain_holds() {
    let Some(disk) = ram_disk(8) else { return };
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

/// Without a filter farm nothing removes a BU's files: a run whose data cannot fit on the BUs'
/// RAM disks below their mark, though they were empty, would hold back for ever. `config check`
/// refuses it when that is certain (an event limit and fixed fragment sizes), with the keys and
/// the arithmetic, and advises it when it is only likely (log-normal sizes); with the farm on,
/// a lumi section larger than the disk is advised (it is published in parts).
#[test]
fn config_check_bu_ramdisk_smaller_than_a_run_without_farm_is_refused_or_advised() {
    let Some(disk) = ram_disk(8) else { return };
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, size: &str, fu: &str| {
        let system = format!(
            "run: {{events: 2000, orbits_per_lumi_section: 262144}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-3\", fragment_size: {size}}}\n\
             bus:\n  - {{name: bu0, directory: {}}}\n\
             fu: {fu}\n",
            disk.path().join("bu0").display()
        );
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, system).unwrap();
        let out = tessera(&["config", "check", file.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    };
    let on = format!("bus[0].directory {} on 8.4 MB", disk.path().join("bu0").display());
    // 2000 events of 17.4 kB (four 4 kB fragments, the trigger's and the FRD header) are
    // 34.7 MB; 90 % of the 8 MB disk is 7.5 MB.
    let (ok, said) = check("fixed", "{bytes: 4096}", "{enabled: false}");
    assert!(!ok, "{said}");
    assert!(
        said.contains(
            "run.events: run.events 2000 make 34.7 MB of events, more than the BUs' RAM disks hold up to \
                       bu.ramdisk_high_water_percent 90 % (7.5 MB in all: "
        ) && said.contains(&on)
            && said.contains("with fu.enabled false nothing removes the BUs' files"),
        "{said}"
    );
    let (ok, said) = check("lognormal", "{mean_bytes: 4096, sigma_bytes: 1000}", "{enabled: false}");
    assert!(ok && said.contains("advice: run.events: run.events 2000 make about 34.7 MB of events"), "{said}");
    let (ok, said) = check("farm", "{bytes: 4096}", "{enabled: true}");
    assert!(ok && said.contains("advice: run.orbits_per_lumi_section: a lumi section of 262144 orbits"), "{said}");
    assert!(said.contains("the FUs publish such a section in parts"), "{said}");
}
