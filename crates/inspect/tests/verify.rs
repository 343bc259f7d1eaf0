//! `verify_run_dir` against run directories written by `tessera-rundir`: an untouched sample
//! passes, and each broken rule is reported with its file, offset and exact message, and nothing
//! else.

use serde_json::Value;
use std::fs;
use std::path::PathBuf;
use tempfile::TempDir;
use tessera_formats::crc::crc32c;
use tessera_formats::fed::{Fragment, fragment_crc, seal_fragment};
use tessera_formats::frd::{FrdEvent, flags};
use tessera_formats::raw::RawFile;
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::{Violation, verify_run_dir, verify_run_dir_expecting};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

const RUN: u32 = 7;
const EOR: &str = "run000007_ls0000_EoR.jsn";
/// Offset of the lumi section in a trigger fragment (docs/formats.md §3).
const TCDS_LUMI_SECTION: usize = 68;

/// A sample run in a temporary directory: 2 lumi sections of 5 events, 2 events per file (files
/// of 2, 2 and 1 events), FEDs 0..4 with 256-byte payloads on average, and a trigger fragment.
struct Run {
    _tmp: TempDir,
    dir: PathBuf,
}

fn sample() -> Run {
    sample_from(1)
}

fn sample_from(first_event: u64) -> Run {
    sample_of(first_event, (0..4).collect())
}

/// The sample run with data FEDs `fed_ids` instead of 0..4.
fn sample_of(first_event: u64, fed_ids: Vec<u16>) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SampleSpec {
        run: RUN,
        lumi_sections: 2,
        events_per_lumi_section: 5,
        events_per_file: 2,
        fed_ids,
        fed_payload_bytes_mean: 256,
        first_event,
        source: "test-bu".into(),
    };
    let summary = write_sample_run(tmp.path(), &spec).unwrap();
    assert_eq!(summary.files.len(), 6);
    Run { dir: summary.run_dir, _tmp: tmp }
}

/// The sample run whose lumi section 2 (events 6..=10) was written without FED 3: its files,
/// their `.jsn` and its EoLS are those of the same run written with FEDs 0..3, so that every
/// rule of the file contract holds.
fn sample_without_fed_3_in_ls_2() -> Run {
    let run = sample();
    let without = sample_of(1, (0..3).collect());
    for name in [raw(2, 0), jsn(2, 0), raw(2, 1), jsn(2, 1), raw(2, 2), jsn(2, 2), eols(2)] {
        fs::copy(without.path(&name), run.path(&name)).unwrap();
    }
    run
}

impl Run {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn verify(&self) -> Vec<Violation> {
        self.verify_with(EventChecks::default())
    }

    fn verify_with(&self, checks: EventChecks) -> Vec<Violation> {
        verify_run_dir(&self.dir, checks).unwrap()
    }

    fn size(&self, name: &str) -> u64 {
        fs::metadata(self.path(name)).unwrap().len()
    }

    /// Bytes of the raw files of lumi section `ls`.
    fn ls_bytes(&self, ls: u32) -> u64 {
        (0..3).map(|i| self.size(&raw(ls, i))).sum()
    }

    /// Changes the `data` array of a JSON document.
    fn edit_data(&self, name: &str, edit: impl FnOnce(&mut Vec<Value>)) {
        let path = self.path(name);
        let mut doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        edit(doc["data"].as_array_mut().unwrap());
        fs::write(&path, doc.to_string()).unwrap();
    }

    /// Changes the bytes of a raw file.
    fn edit_file(&self, name: &str, edit: impl FnOnce(&mut Vec<u8>)) {
        let path = self.path(name);
        let mut bytes = fs::read(&path).unwrap();
        edit(&mut bytes);
        fs::write(&path, bytes).unwrap();
    }

    /// Rewrites record `n` of raw file `name` with `edit` (given the record, header included),
    /// then, if `fix_crc32c`, recomputes the record's CRC-32C. Returns the record's file offset.
    fn edit_event(&self, name: &str, n: usize, fix_crc32c: bool, edit: impl FnOnce(&mut [u8])) -> usize {
        let mut at = 0;
        self.edit_file(name, |bytes| {
            let (offset, len) = records(bytes)[n];
            at = offset;
            let record = &mut bytes[offset..offset + len];
            edit(record);
            if fix_crc32c {
                let crc = crc32c(&record[24..]);
                record[20..24].copy_from_slice(&crc.to_le_bytes());
            }
        });
        at
    }

    fn copy(&self, from: &str, to: &str) {
        fs::copy(self.path(from), self.path(to)).unwrap();
    }

    fn remove(&self, name: &str) {
        fs::remove_file(self.path(name)).unwrap();
    }
}

fn raw(ls: u32, index: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_index{index:06}.raw")
}

fn jsn(ls: u32, index: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_index{index:06}.jsn")
}

fn eols(ls: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_EoLS.jsn")
}

fn v(file: &str, offset: Option<u64>, message: &str) -> Violation {
    Violation { file: file.to_owned(), offset, message: message.to_owned() }
}

/// (file offset, length) of every record of a raw file.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    RawFile::parse(bytes).unwrap().events().map(|e| e.unwrap()).map(|(at, ev)| (at, ev.record_bytes())).collect()
}

/// (offset in the record, length) of FED `fed`'s fragment in an FRD record.
fn fragment_in(record: &[u8], fed: u16) -> (usize, usize) {
    let event = FrdEvent::parse(record).unwrap();
    let (at, f) = event.fragments().map(|f| f.unwrap()).find(|(_, f)| f.header.source_id == fed).unwrap();
    (at, f.len())
}

/// Recomputes the CRC-16 of the fragment at `record[at..at + len]`.
fn reseal(record: &mut [u8], (at, len): (usize, usize)) {
    let fragment = &mut record[at..at + len];
    let f = Fragment::parse(fragment).unwrap();
    let (header, trailer) = (f.header, f.trailer);
    seal_fragment(fragment, &header, &trailer).unwrap();
}

// 1. An untouched run.

#[test]
fn a_sample_run_passes() {
    assert_eq!(sample().verify(), []);
}

#[test]
fn a_sample_run_whose_lv1_id_wraps_passes() {
    let run = sample_from((1 << 24) - 3);
    assert_eq!(run.verify(), []);
}

// 2. A truncated raw file.

#[test]
fn a_truncated_raw_file() {
    let run = sample();
    let name = raw(1, 0);
    let size = run.size(&name);
    let ls_bytes = run.ls_bytes(1);
    let second = records(&fs::read(run.path(&name)).unwrap())[1];
    run.edit_file(&name, |b| b.truncate(b.len() - 10));
    let payload = second.1 as u64 - 24;
    let payload_at = second.0 as u64 + 24;
    assert_eq!(
        run.verify(),
        [
            v(EOR, None, "NEvents says 10, the run holds 9"),
            v(&eols(1), None, "NEvents says 5, the lumi section's raw files hold 4"),
            v(&eols(1), None, &format!("NBytes says {ls_bytes}, the lumi section's raw files hold {}", ls_bytes - 10)),
            v(
                &jsn(1, 0),
                None,
                &format!("says 2 events and {size} bytes; the raw file holds 1 events and {} bytes", size - 10),
            ),
            v(&name, Some(0), &format!("raw file truncated at byte 0: needs {size} bytes, {} available", size - 10)),
            v(
                &name,
                Some(payload_at),
                &format!(
                    "FRD event payload truncated at byte {payload_at}: needs {payload} bytes, {} available",
                    payload - 10
                ),
            ),
        ]
    );
}

// 3. A flipped payload byte.

/// Flips payload byte 5 of FED 2 in the second event (event 2) of the first file; returns the
/// offsets of the event and of the fragment, the stored and computed CRC-16 and the stored and
/// computed CRC-32C.
fn flip_fed_byte(run: &Run, fix_crc32c: bool) -> (u64, u64, u16, u16, u32, u32) {
    let mut out = (0, 0, 0, 0, 0, 0);
    let at = run.edit_event(&raw(1, 0), 1, fix_crc32c, |record| {
        let (frag, len) = fragment_in(record, 2);
        let stored16 = Fragment::parse(&record[frag..frag + len]).unwrap().trailer.crc;
        let stored32 = u32::from_le_bytes(record[20..24].try_into().unwrap());
        record[frag + 8 + 5] ^= 0x10;
        out = (0, frag as u64, stored16, fragment_crc(&record[frag..frag + len]), stored32, crc32c(&record[24..]));
    });
    out.0 = at as u64;
    out.1 += at as u64;
    out
}

#[test]
fn a_flipped_payload_byte_with_a_stale_crc32c() {
    let run = sample();
    let (event, fed, stored16, computed16, stored32, computed32) = flip_fed_byte(&run, false);
    let name = raw(1, 0);
    assert_eq!(
        run.verify(),
        [
            v(
                &name,
                Some(event),
                &format!(
                    "event 2: FRD event: CRC-32C mismatch at byte {event}: stored {stored32:#x}, computed {computed32:#x}"
                ),
            ),
            v(
                &name,
                Some(fed),
                &format!(
                    "event 2 FED 2: FED fragment: CRC-16 mismatch at byte {fed}: stored {stored16:#x}, computed {computed16:#x}"
                ),
            ),
            v(&name, Some(fed + 8 + 5), "event 2 FED 2: payload differs from its seeded content"),
        ]
    );
}

#[test]
fn a_flipped_payload_byte_with_its_crc32c_recomputed() {
    let run = sample();
    let (_, fed, stored16, computed16, ..) = flip_fed_byte(&run, true);
    let name = raw(1, 0);
    let crc16 = v(
        &name,
        Some(fed),
        &format!(
            "event 2 FED 2: FED fragment: CRC-16 mismatch at byte {fed}: stored {stored16:#x}, computed {computed16:#x}"
        ),
    );
    assert_eq!(
        run.verify(),
        [crc16.clone(), v(&name, Some(fed + 8 + 5), "event 2 FED 2: payload differs from its seeded content")]
    );
    // Without the seeded-payload check, only the CRC-16 remains.
    assert_eq!(run.verify_with(EventChecks { seeded_payloads: false }), [crc16]);
}

#[test]
fn a_flipped_payload_byte_with_both_checksums_recomputed() {
    let run = sample();
    let mut fed = 0;
    let at = run.edit_event(&raw(1, 0), 1, true, |record| {
        let frag = fragment_in(record, 2);
        record[frag.0 + 8 + 5] ^= 0x10;
        reseal(record, frag);
        fed = frag.0;
    });
    let offset = (at + fed + 8 + 5) as u64;
    assert_eq!(run.verify(), [v(&raw(1, 0), Some(offset), "event 2 FED 2: payload differs from its seeded content")]);
}

#[test]
fn a_fragment_flagged_with_the_f_bit_is_said_as_another_feds_not_as_a_payload_mismatch() {
    let run = sample();
    let mut fed = 0;
    let at = run.edit_event(&raw(1, 0), 1, true, |record| {
        let frag = fragment_in(record, 2);
        // Another FED's payload under FED 2's id, as an RU passes it on: F bit set (bit 14 of
        // the trailer's low half, not covered by the CRC-16).
        record[frag.0 + 8 + 5] ^= 0x10;
        record[frag.0 + frag.1 - 8 + 1] |= 0x40;
        reseal(record, frag);
        fed = frag.0;
    });
    assert_eq!(
        run.verify(),
        [v(
            &raw(1, 0),
            Some((at + fed) as u64),
            "event 2 FED 2: trailer's F bit set: the RU received this id on another FED's stream, so the \
             fragment is not FED 2's data (payload not checked)"
        )]
    );
}

// 4. Raw file headers.

#[test]
fn a_raw_file_with_a_wrong_magic() {
    let run = sample();
    run.edit_file(&raw(2, 1), |b| b[7] = b'3');
    assert_eq!(
        run.verify(),
        [v(
            &raw(2, 1),
            Some(0),
            "raw file header: bad magic at byte 0: expected \"RAW_0002\" or \"RAW_0001\", found \"RAW_0003\""
        )]
    );
}

#[test]
fn an_unreadable_raw_file_still_has_its_bytes_checked() {
    let run = sample();
    let size = run.size(&raw(2, 1));
    run.edit_file(&raw(2, 1), |b| b[7] = b'3');
    run.edit_data(&jsn(2, 1), |d| d[1] = "1".into());
    assert_eq!(
        run.verify(),
        [
            v(&jsn(2, 1), None, &format!("says 1 bytes; the raw file holds {size} bytes")),
            v(
                &raw(2, 1),
                Some(0),
                "raw file header: bad magic at byte 0: expected \"RAW_0002\" or \"RAW_0001\", found \"RAW_0003\""
            ),
        ]
    );
}

#[test]
fn a_raw_file_with_a_wrong_header_size() {
    let run = sample();
    run.edit_file(&raw(2, 1), |b| b[8] = 24);
    assert_eq!(
        run.verify(),
        [v(&raw(2, 1), Some(8), "raw file header: bad header size at byte 8: expected 32, found 24")]
    );
}

#[test]
fn a_raw_file_of_another_data_type() {
    let run = sample();
    run.edit_file(&raw(2, 1), |b| b[10..12].copy_from_slice(&0x0100u16.to_le_bytes()));
    // Its records are not read, so no count is checked against them.
    assert_eq!(run.verify(), [v(&raw(2, 1), Some(10), "data type 256 holds no FRD events; records not read")]);
}

#[test]
fn a_raw_file_whose_event_count_is_one_too_many() {
    let run = sample();
    run.edit_file(&raw(1, 1), |b| b[12] += 1);
    assert_eq!(
        run.verify(),
        [v(
            &raw(1, 1),
            Some(12),
            "raw file header: bad event count at byte 12: expected 2 (records in the file), found 3"
        )]
    );
}

#[test]
fn a_raw_file_whose_event_count_is_one_too_few() {
    let run = sample();
    run.edit_file(&raw(1, 1), |b| b[12] -= 1);
    assert_eq!(
        run.verify(),
        [v(
            &raw(1, 1),
            Some(12),
            "raw file header: bad event count at byte 12: expected 2 (records in the file), found 1"
        )]
    );
}

#[test]
fn a_raw_file_whose_size_field_is_too_small() {
    let run = sample();
    let size = run.size(&raw(1, 2));
    run.edit_file(&raw(1, 2), |b| b[24..32].copy_from_slice(&(size - 1).to_le_bytes()));
    assert_eq!(
        run.verify(),
        [v(
            &raw(1, 2),
            Some(24),
            &format!(
                "raw file header: bad file size at byte 24: expected {size} (the file's size), found {}",
                size - 1
            )
        )]
    );
}

#[test]
fn a_raw_file_whose_size_field_is_too_large() {
    let run = sample();
    let size = run.size(&raw(1, 2));
    run.edit_file(&raw(1, 2), |b| b[24..32].copy_from_slice(&(size + 1).to_le_bytes()));
    // A size field larger than the file reads as a truncated file.
    assert_eq!(
        run.verify(),
        [v(&raw(1, 2), Some(0), &format!("raw file truncated at byte 0: needs {} bytes, {size} available", size + 1))]
    );
}

// 5. Index JSON files.

#[test]
fn a_raw_file_without_its_jsn() {
    let run = sample();
    run.remove(&jsn(1, 1));
    assert_eq!(run.verify(), [v(&raw(1, 1), None, "published without its .jsn")]);
}

#[test]
fn a_jsn_without_its_raw_file() {
    let run = sample();
    let ls_bytes = run.ls_bytes(1);
    let gone = run.size(&raw(1, 2));
    run.remove(&raw(1, 2));
    assert_eq!(
        run.verify(),
        [
            v(EOR, None, "NEvents says 10, the run holds 9"),
            v(EOR, None, "NFiles says 6, the run holds 5"),
            v(&eols(1), None, "NFiles says 3, the lumi section's raw files hold 2"),
            v(&eols(1), None, "NEvents says 5, the lumi section's raw files hold 4"),
            v(
                &eols(1),
                None,
                &format!("NBytes says {ls_bytes}, the lumi section's raw files hold {}", ls_bytes - gone)
            ),
            v(&jsn(1, 2), None, "index JSON without its raw file"),
        ]
    );
}

#[test]
fn a_jsn_that_disagrees_with_its_raw_file() {
    let run = sample();
    let size = run.size(&raw(2, 0));
    run.edit_data(&jsn(2, 0), |d| d[0] = "3".into());
    assert_eq!(
        run.verify(),
        [v(&jsn(2, 0), None, &format!("says 3 events and {size} bytes; the raw file holds 2 events and {size} bytes"))]
    );
}

#[test]
fn a_jsn_with_a_non_numeric_value() {
    let run = sample();
    run.edit_data(&jsn(2, 0), |d| d[0] = "two".into());
    assert_eq!(run.verify(), [v(&jsn(2, 0), None, "index JSON: field NEvents: \"two\" is not an unsigned integer")]);
}

#[test]
fn a_jsn_with_a_missing_value() {
    let run = sample();
    run.edit_data(&jsn(2, 0), |d| {
        d.pop();
    });
    assert_eq!(
        run.verify(),
        [v(&jsn(2, 0), None, "index JSON: field data: expected 2 values (NEvents, NBytes), found 1")]
    );
}

#[test]
fn a_jsn_without_data() {
    let run = sample();
    fs::write(run.path(&jsn(2, 0)), r#"{"definition":"x","source":"y"}"#).unwrap();
    assert_eq!(run.verify(), [v(&jsn(2, 0), None, "index JSON: field data: missing")]);
}

// 6. End-of-lumi records.

#[test]
fn an_eols_that_does_not_close() {
    let run = sample();
    run.edit_data(&eols(1), |d| d[2] = "6".into());
    assert_eq!(run.verify(), [v(&eols(1), None, "NEvents 5 + NLostEvents 0 != TotalEvents 6")]);
}

#[test]
fn an_eols_with_a_wrong_file_count() {
    let run = sample();
    run.edit_data(&eols(2), |d| d[1] = "4".into());
    assert_eq!(run.verify(), [v(&eols(2), None, "NFiles says 4, the lumi section's raw files hold 3")]);
}

#[test]
fn an_eols_missing() {
    let run = sample();
    run.remove(&eols(1));
    assert_eq!(run.verify(), [v(".", None, "lumi section 1: no EoLS record")]);
}

// 7. End of run and leftovers.

#[test]
fn no_eor() {
    let run = sample();
    run.remove(EOR);
    assert_eq!(run.verify(), [v(".", None, "no EoR record: the run did not end")]);
}

#[test]
fn an_eor_with_a_wrong_event_count() {
    let run = sample();
    run.edit_data(EOR, |d| d[0] = "11".into());
    assert_eq!(run.verify(), [v(EOR, None, "NEvents says 11, the run holds 10")]);
}

#[test]
fn open_left_after_the_eor() {
    let run = sample();
    fs::create_dir(run.path("open")).unwrap();
    fs::write(run.path("open").join(raw(3, 0)), b"").unwrap();
    assert_eq!(
        run.verify(),
        [v("open", None, "open/ remains after the EoR, holding 1 files {\"run000007_ls0003_index000000.raw\"}")]
    );
}

#[test]
fn a_temporary_file_left_behind() {
    let run = sample();
    fs::write(run.path("run000007_ls0002_EoLS.jsn.tmp"), b"{}").unwrap();
    assert_eq!(run.verify(), [v("run000007_ls0002_EoLS.jsn.tmp", None, "temporary file left behind")]);
}

#[test]
fn an_unknown_file_name() {
    let run = sample();
    fs::write(run.path("notes.txt"), b"hello").unwrap();
    fs::create_dir(run.path("stuff")).unwrap();
    assert_eq!(
        run.verify(),
        [
            v("notes.txt", None, "name follows no rule of the BU directory"),
            v("stuff", None, "name follows no rule of the BU directory"),
        ]
    );
}

#[test]
fn a_file_of_another_run() {
    let run = sample();
    fs::write(run.path("run000008_ls0001_EoLS.jsn"), b"{}").unwrap();
    assert_eq!(run.verify(), [v("run000008_ls0001_EoLS.jsn", None, "belongs to another run than 7")]);
}

// 8. Duplicated events.

/// Copies raw file 0 of lumi section 1 and its .jsn to index `index`; returns the expected
/// violations that do not depend on the index.
fn duplicate_first_file(run: &Run, index: u32) -> Vec<Violation> {
    let ls_bytes = run.ls_bytes(1);
    let size = run.size(&raw(1, 0));
    run.copy(&raw(1, 0), &raw(1, index));
    run.copy(&jsn(1, 0), &jsn(1, index));
    let first = raw(1, 0);
    let offsets = records(&fs::read(run.path(&first)).unwrap());
    vec![
        v(EOR, None, "NEvents says 10, the run holds 12"),
        v(EOR, None, "NFiles says 6, the run holds 7"),
        v(&eols(1), None, "NFiles says 3, the lumi section's raw files hold 4"),
        v(&eols(1), None, "NEvents says 5, the lumi section's raw files hold 7"),
        v(&eols(1), None, &format!("NBytes says {ls_bytes}, the lumi section's raw files hold {}", ls_bytes + size)),
        v(&raw(1, index), Some(offsets[0].0 as u64), &format!("event 1 is also in {first}: duplicated")),
        v(&raw(1, index), Some(offsets[1].0 as u64), &format!("event 2 is also in {first}: duplicated")),
    ]
}

#[test]
fn a_raw_file_copied_to_the_next_index() {
    let run = sample();
    let expected = duplicate_first_file(&run, 3);
    assert_eq!(run.verify(), expected);
}

#[test]
fn a_raw_file_copied_past_a_gap() {
    let run = sample();
    let mut expected = duplicate_first_file(&run, 5);
    expected.insert(0, v(".", None, "lumi section 1: raw file indices [0, 1, 2, 5] are not 0, 1, 2..."));
    assert_eq!(run.verify(), expected);
}

// 9. The trigger fragment's lumi section.

#[test]
fn a_trigger_fragment_in_another_lumi_section() {
    let run = sample();
    let mut tcds = 0;
    let at = run.edit_event(&raw(1, 0), 0, true, |record| {
        let frag = fragment_in(record, 1024);
        let ls = frag.0 + TCDS_LUMI_SECTION;
        record[ls..ls + 4].copy_from_slice(&2u32.to_le_bytes());
        reseal(record, frag);
        tcds = frag.0;
    });
    let tcds = (at + tcds) as u64;
    let field = tcds + TCDS_LUMI_SECTION as u64;
    assert_eq!(
        run.verify(),
        [
            v(&raw(1, 0), Some(tcds), "event 1: trigger fragment says lumi section 2, the event 1"),
            v(
                &raw(1, 0),
                Some(field),
                &format!(
                    "event 1: trigger fragment: bad lumi section (orbit / 2^18 + 1) at byte {field}: expected 1, found 2"
                ),
            ),
        ]
    );
}

// 10. Definitions and fu.lock.

#[test]
fn an_altered_jsd() {
    let run = sample();
    let path = run.path("jsd/rawData.jsd");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replacen("\"sum\"", "\"same\"", 1)).unwrap();
    assert_eq!(
        run.verify(),
        [v(
            "jsd/rawData.jsd",
            None,
            "legend differs from the standard one; expected {\"legend\":[{\"name\":\"NEvents\",\"operation\":\"sum\",\"type\":\"integer\"},\
             {\"name\":\"NBytes\",\"operation\":\"sum\",\"type\":\"integer\"}]}"
        )]
    );
}

#[test]
fn an_unreadable_jsd() {
    let run = sample();
    fs::write(run.path("jsd/EoR.jsd"), "{").unwrap();
    assert_eq!(
        run.verify(),
        [v("jsd/EoR.jsd", None, ".jsd legend: field (document): EOF while parsing an object at line 1 column 1")]
    );
}

#[test]
fn a_garbage_fu_lock() {
    let run = sample();
    fs::write(run.path("fu.lock"), "garbage").unwrap();
    assert_eq!(
        run.verify(),
        [v(
            "fu.lock",
            Some(0),
            "fu.lock: bad content at byte 0: expected \"<next LS> <next index>\", found \"garbage\""
        )]
    );
    fs::write(run.path("fu.lock"), "1 x").unwrap();
    assert_eq!(
        run.verify(),
        [v("fu.lock", Some(2), "fu.lock: bad next index at byte 2: expected an unsigned 32-bit decimal, found \"x\"")]
    );
}

#[test]
fn a_missing_fu_lock() {
    let run = sample();
    fs::remove_file(run.path("fu.lock")).unwrap();
    let violations = run.verify();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert_eq!((violations[0].file.as_str(), violations[0].offset), ("fu.lock", None));
    assert!(violations[0].message.starts_with("cannot read: "), "{violations:?}");
}

#[test]
fn files_processed_by_fus_are_not_missing_but_counts_still_bound_what_is_left() {
    let run = sample();
    // Without an FU, a raw file that disappears is a violation.
    fs::remove_file(run.path(&raw(1, 0))).unwrap();
    fs::remove_file(run.path(&jsn(1, 0))).unwrap();
    assert!(!run.verify().is_empty());
    // With FUs at work (fu/ exists), processed files leave: what is left is within the counts.
    fs::create_dir(run.path("fu")).unwrap();
    assert_eq!(run.verify(), []);
    // A file the EoLS does not count is still found.
    fs::copy(run.path(&raw(1, 1)), run.path(&raw(1, 5))).unwrap();
    fs::copy(run.path(&jsn(1, 1)), run.path(&jsn(1, 5))).unwrap();
    assert!(run.verify().iter().any(|v| v.message.contains("says")), "{:?}", run.verify());
}

// 11. Events against the run's FED list.

#[test]
fn events_that_miss_a_fed_of_the_list_are_violations_naming_it() {
    let run = sample_without_fed_3_in_ls_2();
    // Every rule of the file contract holds: only the FED list tells that FED 3 is missing.
    assert_eq!(run.verify(), []);
    // Event 8 (the first of lumi section 2's second file) flagged incomplete, as a BU does.
    let flagged_at = run.edit_event(&raw(2, 1), 0, false, |record| {
        let f = u16::from_le_bytes([record[2], record[3]]) | flags::INCOMPLETE;
        record[2..4].copy_from_slice(&f.to_le_bytes());
    });
    let all = [1024, 0, 1, 2, 3];
    let (found, coverage) = verify_run_dir_expecting(&run.dir, EventChecks::default(), &all).unwrap();
    let offsets = |name: &str| records(&fs::read(run.path(name)).unwrap());
    let mut expected = Vec::new();
    for (index, first) in [(0, 6), (1, 8), (2, 10)] {
        for (i, (at, _)) in offsets(&raw(2, index)).into_iter().enumerate() {
            let event = first + i;
            let flag = if event == 8 { "flagged incomplete" } else { "not flagged incomplete" };
            expected.push(v(&raw(2, index), Some(at as u64), &format!("event {event}: FED 3 missing ({flag})")));
        }
    }
    assert_eq!(expected[2].offset, Some(flagged_at as u64));
    assert_eq!(found, expected);
    assert_eq!((coverage.events, coverage.events_missing_feds, coverage.events_flagged_incomplete), (10, 5, 1));
    assert_eq!(coverage.missing_per_fed.into_iter().collect::<Vec<_>>(), [(3, 5)]);
    assert!(coverage.unexpected_per_fed.is_empty());
    assert_eq!(coverage.expected_feds, [0, 1, 2, 3, 1024]);
}

#[test]
fn a_list_of_the_feds_every_event_holds_passes_and_counts_the_others() {
    let run = sample_without_fed_3_in_ls_2();
    let (found, coverage) = verify_run_dir_expecting(&run.dir, EventChecks::default(), &[1024, 0, 1, 2]).unwrap();
    assert_eq!(found, []);
    assert_eq!((coverage.events, coverage.events_missing_feds), (10, 0));
    // FED 3 is in lumi section 1's 5 events: outside the list, which is no violation.
    assert_eq!(coverage.unexpected_per_fed.into_iter().collect::<Vec<_>>(), [(3, 5)]);
}

#[test]
fn the_list_checks_nothing_else_and_misses_nothing_else() {
    // A whole run passes against its list; a broken rule is still found with the list given.
    let run = sample();
    let list = [1024, 0, 1, 2, 3];
    assert_eq!(verify_run_dir_expecting(&run.dir, EventChecks::default(), &list).unwrap().0, []);
    run.remove(EOR);
    let (found, _) = verify_run_dir_expecting(&run.dir, EventChecks::default(), &list).unwrap();
    assert_eq!(found, [v(".", None, "no EoR record: the run did not end")]);
}

/// `inspect` of a run directory checks each file as `inspect` of the file does: a payload byte
/// flipped in one raw file, another cut short, and a `.jsn` whose count was changed are each
/// named, and an untouched directory has no problem.
#[test]
fn inspect_of_a_run_directory_names_each_damaged_file_as_inspect_of_the_file_does() {
    let clean = sample();
    assert_eq!(tessera_inspect::inspect_path(&clean.dir, EventChecks::default()).unwrap().problem_count(), 0);
    let run = sample();
    let raw = |ls: u32, index: u32| run.dir.join(format!("run000007_ls{ls:04}_index{index:06}.raw"));
    let mut flipped = fs::read(raw(1, 0)).unwrap();
    let at = flipped.len() - 100;
    flipped[at] ^= 0x10;
    fs::write(raw(1, 0), flipped).unwrap();
    let cut = fs::read(raw(1, 1)).unwrap();
    fs::write(raw(1, 1), &cut[..cut.len() - 40]).unwrap();
    let jsn = run.dir.join("run000007_ls0002_index000000.jsn");
    let text = fs::read_to_string(&jsn).unwrap().replacen("\"2\"", "\"3\"", 1);
    fs::write(&jsn, text).unwrap();
    let report = tessera_inspect::inspect_path(&run.dir, EventChecks::default()).unwrap();
    let tessera_inspect::Target::RunDir(d) = &report else { panic!("a run directory: {report:?}") };
    let said: Vec<&str> = d.problems.iter().map(|p| p.message.as_str()).collect();
    for name in
        ["run000007_ls0001_index000000.raw", "run000007_ls0001_index000001.raw", "run000007_ls0002_index000000.jsn"]
    {
        assert!(said.iter().any(|m| m.starts_with(name)), "{name} not named: {said:#?}");
    }
    assert!(report.problem_count() >= 3);
}
