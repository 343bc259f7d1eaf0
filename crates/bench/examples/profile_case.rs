//! Runs one case of `tessera bench evb`'s main cases alone, for as long as asked, so that a
//! sampling profiler sees it and nothing else: the cycle budget per fragment of BENCHMARKS.md
//! comes from `perf record` over this program.
//!
//! ```text
//! cargo build --release -p tessera-bench --example profile_case
//! perf record -g -o b.data target/release/examples/profile_case b 10
//! perf report -i b.data --no-children --sort comm,sym
//! ```
//!
//! Cases: `a` raw ingest, `a+` minimal ingest, `b` RU ingest, `c` the chain to 2 discarding
//! BUs, `d` the chain to the RAM disk, `e` raw relay, `e+` minimal relay; 12 streams of 2 kB
//! fragments as the main cases. The second argument is the wire bytes to send, in GB (default
//! 4). The figures printed are those of the suite: GB/s and CPU ns per fragment.

use std::process::ExitCode;
use tessera_bench::evb::{BuOutput, run_case};
use tessera_bench::evb_suite::{MAIN_BUS, MAIN_FRAGMENT_BYTES, MAIN_STREAMS, MAIN_WRITER_THREADS, event_case};
use tessera_bench::minimal::{minimal_ingest, minimal_relay};
use tessera_bench::net::{NetBudget, NetCase, StreamMode, raw_ingest, raw_relay};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(which) = args.first() else {
        eprintln!("usage: profile_case a|a+|b|c|d|e|e+ [GB]");
        return ExitCode::FAILURE;
    };
    let gb: f64 = match args.get(1).map(|s| s.parse()) {
        None => 4.0,
        Some(Ok(gb)) if gb > 0.0 => gb,
        Some(_) => {
            eprintln!("profile_case: the wire bytes to send are a positive number of GB, not {:?}", args[1]);
            return ExitCode::FAILURE;
        }
    };
    let budget = NetBudget { seconds: 600.0, bytes: (gb * 1e9) as u64 };
    let net = NetCase {
        streams: MAIN_STREAMS,
        fragment_bytes: MAIN_FRAGMENT_BYTES,
        mode: StreamMode::Event,
        relay_outputs: MAIN_BUS,
        budget,
    };
    let evb = |bus, output| event_case(1, bus, MAIN_STREAMS, MAIN_FRAGMENT_BYTES, output, budget);
    // GB/s, CPU ns per fragment of the receiving thread (the RU's loop thread), fragments.
    let raw = |m: tessera_bench::net::Measured| (m.gb_per_s(), m.cpu_ns_per_fragment(), m.fragments);
    let measured = match which.as_str() {
        "a" => raw_ingest(&net).map(raw),
        "a+" => minimal_ingest(&net).map(raw),
        "e" => raw_relay(&net).map(raw),
        "e+" => minimal_relay(&net).map(raw),
        "b" | "c" | "d" => {
            let case = match which.as_str() {
                "b" => evb(0, BuOutput::IngestOnly),
                "c" => evb(MAIN_BUS, BuOutput::Discard),
                _ => evb(MAIN_BUS, BuOutput::RamDisk { writer_threads: MAIN_WRITER_THREADS }),
            };
            run_case(&case).map(|m| (m.gb_per_s(), m.ru_cpu_ns_per_fragment(), m.fragments))
        }
        other => {
            eprintln!("profile_case: no case {other:?}; a, a+, b, c, d, e or e+");
            return ExitCode::FAILURE;
        }
    };
    match measured {
        Ok((gb_per_s, ns, fragments)) => {
            println!("({which}) {gb_per_s:.2} GB/s, {ns:.0} ns of CPU per fragment, {fragments} fragments");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("profile_case ({which}): {e}");
            ExitCode::FAILURE
        }
    }
}
