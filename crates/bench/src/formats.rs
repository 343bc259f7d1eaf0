//! `tessera bench formats`: checksums and fragment validation, against memcpy of the same bytes.
//!
//! Cases, all on one core over about 2 MiB of fragments (so the data sits in cache, as a
//! just-received buffer does):
//! - memcpy of the buffer, the baseline every GB/s figure is divided by, measured the way those
//!   figures are: the same 2 MiB source read once a call, copied in [`COPY_PIECE_BYTES`] pieces
//!   into one destination of that size, so that the working set is the source's, as a checksum's
//!   is. A copy into a second 2 MiB buffer doubles the working set beyond a core's L2 cache
//!   (2 MiB on the machines Tessera is measured on) and adds write-backs that no checksum or
//!   parse does; it is measured too ("memcpy 2 MiB -> 2 MiB") but divides nothing;
//! - CRC-32C and CRC-16/CMS (word-wise) over the buffer;
//! - per fragment size: the CRC-16 of each fragment alone, header-and-trailer checks walking an
//!   FRD payload backwards, the same with CRC-16, and FEROL-stream parsing (block headers, FED header and trailer) with and without
//!   CRC-16.

use crate::Target;
use crate::timing::{Budget, gb_per_s, time_per_call};
use std::hint::black_box;
use tessera_formats::crc::{Crc16Words, crc32c};
use tessera_formats::fed::{CrcCheck, Fragment, fragment_crc};
use tessera_formats::ferol::{FerolStream, ferol_wire_len, write_ferol_blocks};
use tessera_formats::seeded::write_seeded_fragment;

/// Fragment sizes measured, in bytes, header and trailer included.
pub const FRAGMENT_SIZES: [usize; 4] = [256, 2048, 8192, 65536];
/// Bytes of fragments per case.
const BUFFER_BYTES: usize = 2 << 20;
/// Pieces the memcpy baseline copies the buffer in, into one destination of this size.
pub const COPY_PIECE_BYTES: usize = 4096;

/// Targets of issues #2 and #37, checked against the figures.
const CRC32C_TARGET_GB_S: f64 = 30.0;
const CRC16_TARGET_GB_S_AT_2K: f64 = 20.0;
const FEROL_CRC16_TARGET_GB_S_AT_2K: f64 = 4.0;
const HEADER_TRAILER_TARGET_NS: f64 = 20.0;

/// One measured case.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub case: String,
    /// Fragment size in bytes, where it applies.
    pub fragment_bytes: Option<usize>,
    /// Throughput in GB/s (10^9 bytes).
    pub gb_s: f64,
    /// Nanoseconds per fragment, where it applies.
    pub ns_per_fragment: Option<f64>,
}

/// Contiguous fragments of `size` bytes (an FRD payload) and the same as a FEROL stream.
fn fragments(size: usize) -> (Vec<u8>, Vec<u8>, usize) {
    let count = (BUFFER_BYTES / size).max(1);
    let mut payload = vec![0u8; count * size];
    let mut stream = vec![0u8; count * ferol_wire_len(size)];
    let mut at = 0;
    for (i, frag) in payload.chunks_exact_mut(size).enumerate() {
        write_seeded_fragment(frag, 1, 100, i as u64, 1, size - 16).expect("buffer sized for the fragment");
        at += write_ferol_blocks(frag, &mut stream[at..]).expect("buffer sized for the stream");
    }
    (payload, stream, count)
}

/// Runs every case and returns the rows, memcpy first.
pub fn run(budget: Budget) -> Vec<Row> {
    let mut rows = Vec::new();
    let src = vec![0x5Au8; BUFFER_BYTES];
    let mut piece = [0u8; COPY_PIECE_BYTES];
    let t = time_per_call(budget, || {
        for chunk in black_box(&src).chunks_exact(COPY_PIECE_BYTES) {
            piece.copy_from_slice(chunk);
            black_box(&mut piece);
        }
    });
    rows.push(Row {
        case: "memcpy (baseline)".into(),
        fragment_bytes: None,
        gb_s: gb_per_s(BUFFER_BYTES, t),
        ns_per_fragment: None,
    });
    let mut dst = vec![0u8; BUFFER_BYTES];
    let t = time_per_call(budget, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
    });
    rows.push(Row {
        case: "memcpy 2 MiB -> 2 MiB".into(),
        fragment_bytes: None,
        gb_s: gb_per_s(BUFFER_BYTES, t),
        ns_per_fragment: None,
    });
    let t = time_per_call(budget, || {
        black_box(crc32c(black_box(&src)));
    });
    rows.push(Row {
        case: "CRC-32C".into(),
        fragment_bytes: None,
        gb_s: gb_per_s(BUFFER_BYTES, t),
        ns_per_fragment: None,
    });
    let t = time_per_call(budget, || {
        let mut crc = Crc16Words::new();
        crc.update(black_box(&src));
        black_box(crc.finish());
    });
    rows.push(Row {
        case: "CRC-16/CMS (word-wise)".into(),
        fragment_bytes: None,
        gb_s: gb_per_s(BUFFER_BYTES, t),
        ns_per_fragment: None,
    });

    for size in FRAGMENT_SIZES {
        let (payload, stream, count) = fragments(size);
        let mut per_fragment = |case: &str, bytes: usize, work: &mut dyn FnMut()| {
            let t = time_per_call(budget, work);
            rows.push(Row {
                case: case.into(),
                fragment_bytes: Some(size),
                gb_s: gb_per_s(bytes, t),
                ns_per_fragment: Some(t.as_secs_f64() * 1e9 / count as f64),
            });
        };
        per_fragment("CRC-16/CMS of each fragment", payload.len(), &mut || {
            for fragment in black_box(&payload).chunks_exact(size) {
                black_box(fragment_crc(fragment));
            }
        });
        per_fragment("header+trailer, FRD walk", payload.len(), &mut || {
            black_box(walk_backwards(black_box(&payload), false));
        });
        per_fragment("header+trailer+CRC-16, FRD walk", payload.len(), &mut || {
            black_box(walk_backwards(black_box(&payload), true));
        });
        per_fragment("FEROL stream, headers", stream.len(), &mut || {
            black_box(walk_ferol(black_box(&stream), CrcCheck::Never));
        });
        per_fragment("FEROL stream, headers+CRC-16 1 in 10", stream.len(), &mut || {
            black_box(walk_ferol(black_box(&stream), CrcCheck::Sampled(10)));
        });
        per_fragment("FEROL stream, headers+CRC-16", stream.len(), &mut || {
            black_box(walk_ferol(black_box(&stream), CrcCheck::Always));
        });
    }
    rows
}

/// The targets of issues #2 and #37, from `rows` (those whose case was measured).
pub fn targets(rows: &[Row]) -> Vec<Target> {
    let find = |case: &str, size: Option<usize>| rows.iter().find(|r| r.case == case && r.fragment_bytes == size);
    let mut targets = Vec::new();
    if let Some(r) = find("CRC-32C", None) {
        targets.push(Target {
            name: format!("CRC-32C >= {CRC32C_TARGET_GB_S} GB/s"),
            figure: format!("{:.1} GB/s", r.gb_s),
            baseline: "a fixed bound (memcpy of the same bytes beside it)".into(),
            met: r.gb_s >= CRC32C_TARGET_GB_S,
        });
    }
    if let Some(r) = find("CRC-16/CMS of each fragment", Some(2048)) {
        targets.push(Target {
            name: format!("CRC-16/CMS of 2 kB fragments >= {CRC16_TARGET_GB_S_AT_2K} GB/s"),
            figure: format!("{:.1} GB/s ({:.0} ns a fragment)", r.gb_s, r.ns_per_fragment.unwrap_or(f64::NAN)),
            baseline: "a fixed bound (memcpy of the same bytes beside it)".into(),
            met: r.gb_s >= CRC16_TARGET_GB_S_AT_2K,
        });
    }
    if let Some(r) = find("FEROL stream, headers+CRC-16", Some(2048)) {
        targets.push(Target {
            name: format!("FEROL validation with CRC-16 at 2 kB >= {FEROL_CRC16_TARGET_GB_S_AT_2K} GB/s"),
            figure: format!("{:.2} GB/s", r.gb_s),
            baseline: "a fixed bound".into(),
            met: r.gb_s >= FEROL_CRC16_TARGET_GB_S_AT_2K,
        });
    }
    let worst = |case: &str| {
        rows.iter()
            .filter(|r| r.case == case)
            .filter_map(|r| r.ns_per_fragment.map(|ns| (ns, r.fragment_bytes.unwrap_or(0))))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    if let Some((ns, size)) = worst("header+trailer, FRD walk") {
        targets.push(Target {
            name: format!("header-and-trailer-only validation <= {HEADER_TRAILER_TARGET_NS} ns/fragment"),
            figure: format!("worst {ns:.1} ns ({size} B)"),
            baseline: "a fixed bound".into(),
            met: ns <= HEADER_TRAILER_TARGET_NS,
        });
    }
    if let Some((ns, size)) = worst("FEROL stream, headers") {
        let blocks = ferol_wire_len(size).div_ceil(tessera_formats::ferol::BLOCK_BYTES);
        targets.push(Target {
            name: format!(
                "FEROL stream, block headers + FED header and trailer <= {HEADER_TRAILER_TARGET_NS} ns/fragment"
            ),
            figure: format!("worst {ns:.1} ns ({size} B, {blocks} blocks, {:.1} ns/block)", ns / blocks as f64),
            baseline: "a fixed bound".into(),
            met: ns <= HEADER_TRAILER_TARGET_NS,
        });
    }
    targets
}

/// Checks every fragment of an FRD payload from its end; returns how many passed.
fn walk_backwards(payload: &[u8], crc: bool) -> usize {
    let mut end = payload.len();
    let mut ok = 0;
    while end > 0 {
        let Ok((fragment, start)) = Fragment::parse_from_end(&payload[..end]) else { break };
        ok += usize::from(!crc || fragment.check_crc().is_ok());
        end = start;
    }
    ok
}

/// Parses every fragment of a FEROL stream, checking the CRC-16 of those `check` says (as an
/// RU with `ru.fragment_crc_check` does); returns how many passed.
fn walk_ferol(stream: &[u8], check: CrcCheck) -> usize {
    FerolStream::new(stream)
        .map_while(|r| r.ok())
        .enumerate()
        .filter(|(i, (_, fragment))| !check.checks(*i as u64) || fragment.check_crc().is_ok())
        .count()
}

/// The rows as a table, with ratios to the memcpy baseline and the targets met or missed.
pub fn report(rows: &[Row]) -> String {
    use std::fmt::Write;
    let baseline = rows.first().map_or(f64::NAN, |r| r.gb_s);
    let mut out = String::new();
    let _ = writeln!(out, "{:<37} {:>9} {:>9} {:>11} {:>10}", "case", "fragment", "GB/s", "ns/fragment", "÷ memcpy");
    for r in rows {
        let size = r.fragment_bytes.map_or("-".into(), |s| s.to_string());
        let ns = r.ns_per_fragment.map_or("-".into(), |n| format!("{n:.1}"));
        let _ = writeln!(out, "{:<37} {:>9} {:>9.2} {:>11} {:>10.2}", r.case, size, r.gb_s, ns, r.gb_s / baseline);
    }
    let _ = writeln!(out, "\ntargets (issues #2 and #37, one core):");
    for t in targets(rows) {
        let _ = writeln!(out, "  {}: {}, {}", t.name, t.figure, t.verdict());
    }
    out
}
