//! The simulator's random numbers: SplitMix64 (`tessera_formats::seeded`), the same sequence
//! on every host for a seed.

use tessera_formats::seeded::SplitMix64;

/// A seeded generator.
#[derive(Debug, Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed ^ 0x5EED_7E55_E4A0_0000))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// A Poisson-distributed count of mean `mean`: Knuth's product of uniforms, in pieces of a
    /// mean of at most 30 (counts add), so that `exp(-mean)` never underflows.
    pub fn poisson(&mut self, mean: f64) -> u64 {
        let mut left = mean.max(0.0);
        let mut count = 0;
        while left > 0.0 {
            let piece = left.min(30.0);
            left -= piece;
            let floor = (-piece).exp();
            let mut product = self.unit();
            while product > floor {
                count += 1;
                product *= self.unit();
            }
        }
        count
    }

    /// A number in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn poisson_counts_have_the_mean_and_variance_of_their_law() {
        for mean in [0.7, 2.0, 66.7] {
            let mut rng = Rng::new(7);
            let n = 20_000;
            let draws: Vec<f64> = (0..n).map(|_| rng.poisson(mean) as f64).collect();
            let m = draws.iter().sum::<f64>() / n as f64;
            let var = draws.iter().map(|d| (d - m) * (d - m)).sum::<f64>() / (n - 1) as f64;
            // Five standard errors of the mean; the variance within 10 %.
            assert!((m - mean).abs() < 5.0 * (mean / n as f64).sqrt(), "mean {m} for {mean}");
            assert!((var / mean - 1.0).abs() < 0.1, "variance {var} for {mean}");
        }
    }
}
