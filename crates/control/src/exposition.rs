//! The `/metrics` page in the OpenMetrics text format, written by the `prometheus-client`
//! crate's encoder: the families are read at one moment ([`Family`]) and handed to a registry
//! as a collector.
//!
//! A counter's samples are named `<family>_total`, as the format has them; its family (the
//! `# HELP` and `# TYPE` lines) is named without the suffix. Values are written as the figures
//! are: an integral figure without a fraction (`2`), any other in the shortest form that reads
//! back the same (`0.6`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    CounterValueEncoder, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, GaugeValueEncoder,
    MetricEncoder,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The content type of the page.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether a family only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A count that only grows; its name ends in `_total`.
    Counter,
    /// A figure that goes up and down.
    Gauge,
}

/// One family of metrics, read at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Family {
    /// The samples' name (a counter's with `_total`).
    name: String,
    help: String,
    kind: Kind,
    /// Each sample's labels (name, value) in order, and its value.
    samples: Vec<(Vec<(String, String)>, f64)>,
}

impl Family {
    /// A family without samples yet; a counter's `name` ends in `_total`.
    pub(crate) fn new(name: &str, kind: Kind, help: &str) -> Family {
        debug_assert!(kind == Kind::Gauge || name.ends_with("_total"), "counter {name} without _total");
        Family { name: name.to_owned(), help: help.to_owned(), kind, samples: Vec::new() }
    }

    /// Adds a sample with `labels` (values as they are; the encoder writes them between quotes,
    /// so the caller escapes them, see [`label`]).
    pub(crate) fn sample(&mut self, labels: &[(&str, &str)], value: f64) {
        let labels = labels.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect();
        self.samples.push((labels, value));
    }
}

/// A figure as the page writes it: integral figures without a fraction.
#[derive(Debug, Clone, Copy)]
struct Figure(f64);

impl Figure {
    /// The figure as an integer, if it is one that `i64` holds exactly.
    fn integral(self) -> Option<i64> {
        let v = self.0;
        (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
    }
}

impl EncodeGaugeValue for Figure {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> Result<(), std::fmt::Error> {
        match self.integral() {
            Some(n) => EncodeGaugeValue::encode(&n, encoder),
            None => EncodeGaugeValue::encode(&self.0, encoder),
        }
    }
}

impl EncodeCounterValue for Figure {
    fn encode(&self, encoder: &mut CounterValueEncoder) -> Result<(), std::fmt::Error> {
        match self.integral().and_then(|n| u64::try_from(n).ok()) {
            Some(n) => EncodeCounterValue::encode(&n, encoder),
            None => EncodeCounterValue::encode(&self.0, encoder),
        }
    }
}

/// The families of one page, as a collector of the registry that encodes them.
#[derive(Debug)]
struct Page(Vec<Family>);

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in &self.0 {
            let (name, kind) = match family.kind {
                Kind::Counter => (family.name.strip_suffix("_total").unwrap_or(&family.name), MetricType::Counter),
                Kind::Gauge => (family.name.as_str(), MetricType::Gauge),
            };
            let mut metric = encoder.encode_descriptor(name, &family.help, None, kind)?;
            if let [(labels, value)] = family.samples.as_slice()
                && labels.is_empty()
            {
                // A sample without labels is written without braces, on the family's encoder.
                encode_sample(family.kind, Figure(*value), metric)?;
                continue;
            }
            for (labels, value) in &family.samples {
                debug_assert!(!labels.is_empty(), "{}: a sample without labels among others", family.name);
                encode_sample(family.kind, Figure(*value), metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

fn encode_sample(kind: Kind, value: Figure, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
    match kind {
        Kind::Counter => ConstCounter::new(value).encode(encoder),
        Kind::Gauge => ConstGauge::new(value).encode(encoder),
    }
}

/// `families` in the OpenMetrics text format, `# EOF` last.
pub(crate) fn encode(families: Vec<Family>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Page(families)));
    let mut text = String::new();
    // Writing to a `String` does not fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
    text
}

/// Escapes a label value for the OpenMetrics text format (its encoder writes values as given).
pub(crate) fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_labels_and_figures_are_written_as_the_format_has_them() {
        let mut built = Family::new("tessera_events_built_total", Kind::Counter, "Events built.");
        built.sample(&[("unit", "bu0"), ("kind", "bu")], 1000.0);
        let mut holds = Family::new("tessera_conservation_holds", Kind::Gauge, "Holds.");
        holds.sample(&[], 1.0);
        let mut ratio = Family::new("tessera_dead_time_ratio", Kind::Gauge, "Dead time.");
        ratio.sample(&[("run", "7")], 0.6);
        ratio.sample(&[("run", "8")], -2.0);
        let empty = Family::new("tessera_run_info", Kind::Gauge, "The run.");
        assert_eq!(
            encode(vec![built, holds, ratio, empty]),
            "# HELP tessera_events_built Events built.\n\
             # TYPE tessera_events_built counter\n\
             tessera_events_built_total{unit=\"bu0\",kind=\"bu\"} 1000\n\
             # HELP tessera_conservation_holds Holds.\n\
             # TYPE tessera_conservation_holds gauge\n\
             tessera_conservation_holds 1\n\
             # HELP tessera_dead_time_ratio Dead time.\n\
             # TYPE tessera_dead_time_ratio gauge\n\
             tessera_dead_time_ratio{run=\"7\"} 0.6\n\
             tessera_dead_time_ratio{run=\"8\"} -2\n\
             # HELP tessera_run_info The run.\n\
             # TYPE tessera_run_info gauge\n\
             # EOF\n"
        );
    }
}
