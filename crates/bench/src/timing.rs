//! A small, honest timer: repeat a closure until a time budget is spent, several times, and keep
//! the median rate.

use std::time::{Duration, Instant};

/// How long to measure each case.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Wall time of one sample.
    pub sample: Duration,
    /// Samples per case; the median is reported.
    pub samples: usize,
}

impl Budget {
    /// Default: 5 samples of 200 ms.
    pub const FULL: Budget = Budget { sample: Duration::from_millis(200), samples: 5 };
    /// For smoke runs: 3 samples of 20 ms.
    pub const QUICK: Budget = Budget { sample: Duration::from_millis(20), samples: 3 };
}

/// Median time of one call of `work`, measured as `budget` says.
pub fn time_per_call(budget: Budget, mut work: impl FnMut()) -> Duration {
    // Warm caches, branch predictors and lazily mapped pages before measuring.
    let warm_until = Instant::now() + budget.sample / 2;
    while Instant::now() < warm_until {
        work();
    }
    let mut per_call: Vec<f64> = (0..budget.samples.max(1))
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < budget.sample {
                work();
                calls += 1;
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    Duration::from_secs_f64(per_call[per_call.len() / 2])
}

/// Bytes per second as GB/s (10^9).
pub fn gb_per_s(bytes: usize, per_call: Duration) -> f64 {
    bytes as f64 / per_call.as_secs_f64() / 1e9
}
