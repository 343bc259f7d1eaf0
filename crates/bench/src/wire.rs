//! The event-building wire format: the cost of sending and receiving one data message, against
//! memcpy of its fragment bytes. Not yet a `tessera bench` suite; [`run`] and [`report`] are
//! ready for one.
//!
//! Cases, on one core, for a data message of [`EVENTS`] super-fragments of [`FRAGMENTS`]
//! fragments of [`FRAGMENT_BYTES`] bytes each:
//! - memcpy of the fragment bytes: the baseline;
//! - sender: `encode_data_header` (descriptors, and CRC-32C over descriptors and fragments where
//!   they lie, for a vectored write);
//! - receiver: `FrameDecoder::push` of the whole frame (one copy into its buffer), the header
//!   and CRC-32C check, and `Frame::decode` (descriptors and fragment ranges).

use crate::timing::{Budget, gb_per_s, time_per_call};
use std::hint::black_box;
use tessera_evb::msg::{BufferRef, FragmentRef, SuperFragment};
use tessera_evb::wire::{FrameDecoder, encode_data_header};

/// Super-fragments per data message.
pub const EVENTS: usize = 64;
/// Fragments per super-fragment.
pub const FRAGMENTS: usize = 8;
/// Bytes per fragment.
pub const FRAGMENT_BYTES: usize = 2048;

/// One measured case.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub case: &'static str,
    /// Fragment bytes per second, in GB/s (10^9).
    pub gb_s: f64,
    /// Nanoseconds per message.
    pub ns_per_message: f64,
}

/// Runs every case and returns the rows, memcpy first.
pub fn run(budget: Budget) -> Vec<Row> {
    let total = EVENTS * FRAGMENTS * FRAGMENT_BYTES;
    let payload: Vec<u8> = (0..total).map(|i| (i * 31 + 7) as u8).collect();
    let slices: Vec<&[u8]> = payload.chunks_exact(FRAGMENT_BYTES).collect();
    let parts: Vec<SuperFragment> = (0..EVENTS)
        .map(|e| SuperFragment {
            event: e as u64,
            fragments: (0..FRAGMENTS)
                .map(|f| FragmentRef {
                    fed: f as u16,
                    lv1: e as u32,
                    bytes: FRAGMENT_BYTES as u32,
                    corrupt: false,
                    buffer: BufferRef { offset: (e * FRAGMENTS + f) as u32, ..BufferRef::default() },
                    trigger: None,
                })
                .collect(),
            missing: Vec::new(),
        })
        .collect();
    let mut rows = Vec::new();
    let mut measure = |case, work: &mut dyn FnMut()| {
        let t = time_per_call(budget, work);
        rows.push(Row { case, gb_s: gb_per_s(total, t), ns_per_message: t.as_secs_f64() * 1e9 });
    };

    let mut copy = vec![0u8; total];
    measure("memcpy of the fragments (baseline)", &mut || {
        copy.copy_from_slice(black_box(&payload));
        black_box(&copy);
    });
    let mut head = Vec::new();
    measure("send: encode_data_header", &mut || {
        head.clear();
        encode_data_header(1, 1, black_box(&parts), &[], &slices, &mut head).expect("fragments match");
        black_box(&head);
    });
    let frame: Vec<u8> = head.iter().chain(&payload).copied().collect();
    let mut decoder = FrameDecoder::new();
    measure("receive: push, check, decode", &mut || {
        let taken = decoder.push(black_box(&frame));
        assert_eq!(taken, frame.len());
        let decoded = decoder.next_frame().expect("valid frame").expect("whole frame").decode().expect("valid body");
        black_box(decoded);
    });
    rows
}

/// The rows as a table, with ratios to the memcpy baseline.
pub fn report(rows: &[Row]) -> String {
    use std::fmt::Write;
    let baseline = rows.first().map_or(f64::NAN, |r| r.gb_s);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "data message: {EVENTS} super-fragments x {FRAGMENTS} fragments x {FRAGMENT_BYTES} B\n{:<36} {:>9} {:>12} {:>10}",
        "case", "GB/s", "us/message", "÷ memcpy"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<36} {:>9.2} {:>12.1} {:>10.2}",
            r.case,
            r.gb_s,
            r.ns_per_message / 1e3,
            r.gb_s / baseline
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn runs_every_case() {
        let rows = run(Budget { sample: Duration::from_millis(5), samples: 1 });
        assert_eq!(rows.len(), 3);
        let text = report(&rows);
        assert!(text.contains("encode_data_header"));
        println!("{text}");
    }
}
