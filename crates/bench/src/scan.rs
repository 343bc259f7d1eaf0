//! Scans: a figure measured over one parameter, written as CSV and plotted as SVG, beside
//! reference figures from papers when there are any.
//!
//! A scan is a list of [`Series`], each a named list of (x, y) points. [`write_csv`] writes them
//! in long form, one row per point, so that series need not share their x values; [`plot_svg`]
//! draws measured series as lines with points, reference series as markers only (figures
//! read off a paper's plot are points, not a curve Tessera measured) and limits as dashed lines
//! (a bound such as a link's speed, which no measurement is).
//!
//! The SVG is drawn by `plotters` without any font library: text is left to the SVG viewer, and
//! label widths are estimated, so labels may sit a little off where a viewer's font is wide.

use crate::BenchError;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// Width and height of a plot, in SVG pixels.
pub const PLOT_SIZE: (u32, u32) = (900, 560);
/// Most points one plot draws; a scan is a handful of points per series, so more is a mistake.
pub const MAX_POINTS: usize = 100_000;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlotError {
    /// No series has a point.
    #[error("no points to plot")]
    NoPoints,
    /// More points than [`MAX_POINTS`].
    #[error("{count} points; at most {MAX_POINTS}")]
    TooManyPoints {
        /// The points given.
        count: usize,
    },
    /// A point with a coordinate that is infinite or not a number.
    #[error("point ({x}, {y}) is not finite")]
    NotFinite {
        /// Its x.
        x: f64,
        /// Its y.
        y: f64,
    },
    /// A point at x <= 0 on a logarithmic x axis.
    #[error("x = {x} on a logarithmic axis")]
    NotPositiveOnLogAxis {
        /// Its x.
        x: f64,
    },
    /// `plotters` could not draw the chart or write the file.
    #[error("{0}")]
    Drawing(DrawingAreaErrorKind<std::io::Error>),
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// Measured by Tessera: a line through the points, with small dots.
    Measured,
    /// Figures from elsewhere (a paper's plot): markers only.
    Reference,
    /// A requirement (a rate a system must reach): a line without markers.
    Requirement,
    /// A limit (a bound no measurement can pass, such as a link's speed): a dashed line without
    /// markers, so that it is not taken for a curve.
    Limit,
}

/// One named curve of a scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend and CSV name.
    pub name: String,
    /// The (x, y) points, in the order to draw them.
    pub points: Vec<(f64, f64)>,
    /// How to draw it.
    pub kind: SeriesKind,
}

impl Series {
    /// A series measured by Tessera.
    pub fn measured(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, kind: SeriesKind::Measured }
    }

    /// Reference figures (e.g. read off a paper's plot), drawn as markers.
    pub fn reference(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, kind: SeriesKind::Reference }
    }

    /// A requirement, drawn as a plain line through its points (two points at the same y for a
    /// horizontal line).
    pub fn requirement(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, kind: SeriesKind::Requirement }
    }

    /// A limit, drawn as a dashed line through its points (two points at the same y for a
    /// horizontal line).
    pub fn limit(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, kind: SeriesKind::Limit }
    }
}

/// A CSV field: quoted (with doubled quotes) when it holds a comma, a quote or a line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// The CSV text of a scan: a header `series,<x_label>,<y_label>,kind`, then one row per point,
/// series after series; numbers in Rust's shortest round-trip form.
pub fn csv_text(x_label: &str, y_label: &str, series: &[Series]) -> String {
    let mut out = format!("series,{},{},kind\n", csv_field(x_label), csv_field(y_label));
    for s in series {
        let kind = match s.kind {
            SeriesKind::Measured => "measured",
            SeriesKind::Reference => "reference",
            SeriesKind::Requirement => "requirement",
            SeriesKind::Limit => "limit",
        };
        for (x, y) in &s.points {
            // Writing into a String cannot fail.
            let _ = writeln!(out, "{},{x},{y},{kind}", csv_field(&s.name));
        }
    }
    out
}

/// Writes [`csv_text`] to `path` (created or truncated).
pub fn write_csv(path: &Path, x_label: &str, y_label: &str, series: &[Series]) -> Result<(), BenchError> {
    std::fs::write(path, csv_text(x_label, y_label, series))
        .map_err(|source| BenchError::Io { what: format!("writing {}", path.display()), source })
}

/// The range of `values` with a margin: a factor 1.3 either side on a log axis, 5 % of the span
/// on a linear one (or ±1 when every value is the same).
fn padded(values: impl Iterator<Item = f64> + Clone, log: bool) -> (f64, f64) {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    if log {
        (lo / 1.3, hi * 1.3)
    } else if hi > lo {
        let pad = (hi - lo) * 0.05;
        (lo - pad, hi + pad)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

/// The chart's margin, x-label area and caption, in pixels.
const MARGIN_PX: f64 = 20.0;
const X_LABELS_PX: f64 = 45.0;
const CAPTION_PX: f64 = 30.0;
/// The height of a row of the legend, in pixels (its font, 12 px, and the space between), with
/// some to spare.
const LEGEND_ROW_PX: f64 = 22.0;

/// Plots `series` into an SVG file at `path`: measured series as lines with dots, reference
/// series as triangles, requirements as lines, limits as dashed lines, a legend, axes from the
/// points (y from 0 unless a value is negative; x logarithmic with `log_x`, which needs every
/// x > 0).
pub fn plot_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
) -> Result<(), BenchError> {
    let bad = |reason: PlotError| BenchError::Plot { path: path.to_path_buf(), reason };
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let count = points().count();
    if count == 0 {
        return Err(bad(PlotError::NoPoints));
    }
    if count > MAX_POINTS {
        return Err(bad(PlotError::TooManyPoints { count }));
    }
    if let Some((x, y)) = points().find(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return Err(bad(PlotError::NotFinite { x, y }));
    }
    if log_x && let Some((x, _)) = points().find(|&(x, _)| x <= 0.0) {
        return Err(bad(PlotError::NotPositiveOnLogAxis { x }));
    }
    let (x0, x1) = padded(points().map(|p| p.0), log_x);
    let (y0, y1) = padded(points().map(|p| p.1).chain([0.0]), false);
    let y0 = if y0 < 0.0 && points().all(|p| p.1 >= 0.0) { 0.0 } else { y0 };
    // Room above the data for the legend (upper right), so that it covers no point.
    let plot_px = f64::from(PLOT_SIZE.1) - CAPTION_PX - 2.0 * MARGIN_PX - X_LABELS_PX;
    let legend_px = LEGEND_ROW_PX * series.len() as f64 + LEGEND_ROW_PX;
    let y1 = y0 + (y1 - y0) / (1.0 - (legend_px / plot_px).min(0.6));
    let root = SVGBackend::new(path, PLOT_SIZE).into_drawing_area();
    let drawn = if log_x {
        draw::<LogCoord<f64>>(&root, title, x_label, y_label, series, (x0..x1).log_scale(), y0..y1)
    } else {
        draw::<RangedCoordf64>(&root, title, x_label, y_label, series, x0..x1, y0..y1)
    };
    drawn.and_then(|()| root.present()).map_err(|e| bad(PlotError::Drawing(e)))
}

/// Draws the chart on `root`.
fn draw<X>(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x: impl Into<X>,
    y: std::ops::Range<f64>,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(MARGIN_PX as u32)
        .x_label_area_size(X_LABELS_PX as u32)
        .y_label_area_size(70)
        .build_cartesian_2d(x.into(), RangedCoordf64::from(y))?;
    chart
        .configure_mesh()
        .x_labels(12)
        .x_label_formatter(&|v| format!("{v}"))
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = s.points.iter().copied();
        let drawn = match s.kind {
            SeriesKind::Measured => {
                chart.draw_series(points.clone().map(|p| Circle::new(p, 3, color.filled())))?;
                chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?
            }
            SeriesKind::Reference => chart.draw_series(points.map(|p| TriangleMarker::new(p, 7, color.filled())))?,
            SeriesKind::Requirement => chart.draw_series(LineSeries::new(points, color.stroke_width(3)))?,
            // plotters draws the dashes itself, as one short two-point polyline per dash.
            SeriesKind::Limit => chart.draw_series(DashedLineSeries::new(points, 10, 6, color.stroke_width(2)))?,
        };
        let labelled = drawn.label(s.name.as_str());
        if s.kind == SeriesKind::Limit {
            // A triangle would say "points": the legend of a limit is a stretch of line.
            labelled.legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        } else {
            labelled.legend(move |(x, y)| TriangleMarker::new((x + 10, y), 5, color.filled()));
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan() -> Vec<Series> {
        vec![
            Series::measured("raw TCP ingest", vec![(256.0, 1.5), (2048.0, 3.25)]),
            Series::reference("CMS, \"Run 2\", Fig. 2", vec![(4096.0, 4.0)]),
            Series::requirement("needed", vec![(256.0, 2.0), (4096.0, 2.0)]),
            Series::limit("link", vec![(256.0, 5.0), (4096.0, 5.0)]),
        ]
    }

    #[test]
    fn csv_is_one_row_per_point_with_quoted_names() {
        assert_eq!(
            csv_text("fragment bytes", "GB/s", &scan()),
            "series,fragment bytes,GB/s,kind\n\
             raw TCP ingest,256,1.5,measured\n\
             raw TCP ingest,2048,3.25,measured\n\
             \"CMS, \"\"Run 2\"\", Fig. 2\",4096,4,reference\n\
             needed,256,2,requirement\n\
             needed,4096,2,requirement\n\
             link,256,5,limit\n\
             link,4096,5,limit\n"
        );
    }

    #[test]
    fn csv_file_holds_the_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.csv");
        write_csv(&path, "x", "y", &scan()).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), csv_text("x", "y", &scan()));
    }

    #[test]
    fn svg_is_written_with_title_and_series_names() {
        let dir = tempfile::tempdir().unwrap();
        for log_x in [false, true] {
            let path = dir.path().join(format!("scan-{log_x}.svg"));
            plot_svg(&path, "ingest vs size", "fragment bytes", "GB/s", &scan(), log_x).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
            assert!(svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains("ingest vs size"));
            assert!(svg.contains("raw TCP ingest"));
            assert!(svg.contains("<polyline"), "the measured series is a line");
        }
    }

    /// The `<polyline>` elements of `svg` whose stroke is `color` ("#RRGGBB"), each as its list of
    /// points.
    fn polylines_of(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .map(|tail| &tail[..tail.find("/>").unwrap()])
            .filter(|attrs| attrs.contains(&format!("stroke=\"{color}\"")))
            .map(|attrs| {
                let points = attrs.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
                points
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn limit_is_a_dashed_line_without_markers() {
        // plotters 0.3 writes no stroke-dasharray: it cuts the line itself into dashes, one short
        // two-point <polyline> each, with gaps between them.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("limit.svg");
        let series = [
            Series::measured("measured", vec![(256.0, 1.0), (4096.0, 3.0)]),
            Series::limit("link 100 Gb/s", vec![(256.0, 5.0), (4096.0, 5.0)]),
        ];
        plot_svg(&path, "t", "bytes", "Gb/s", &series, true).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let color = |i: usize| {
            let (r, g, b) = Palette99::pick(i).rgb();
            format!("#{r:02X}{g:02X}{b:02X}")
        };
        let (measured, limit) = (color(0), color(1));
        assert_eq!(polylines_of(&svg, &measured).len(), 1, "the measured line is one polyline (its legend a triangle)");
        let lines = polylines_of(&svg, &limit);
        // The last polyline of the limit's colour is its legend, a 20-pixel stretch of line.
        let (legend, dashes) = lines.split_last().unwrap();
        assert_eq!(legend[1].0 - legend[0].0, 20.0, "{legend:?}");
        // Many dashes across the ~660 pixels between x = 256 and x = 4096, each of two points on
        // the line's y, and gaps between them.
        assert!(dashes.len() > 20, "{} dashes: {dashes:?}", dashes.len());
        let y = dashes[0][0].1;
        assert!(dashes.iter().all(|d| d.len() == 2 && d[0].1 == y && d[1].1 == y), "{dashes:?}");
        assert!(dashes.windows(2).all(|w| w[1][0].0 > w[0][1].0), "no gap between dashes: {dashes:?}");
        let span = dashes.last().unwrap()[1].0 - dashes[0][0].0;
        assert!(span > 600.0, "the dashes span {span} pixels");
        // No markers: the measured series has its dots, the limit none.
        assert!(svg.contains("<circle cx=") && svg.contains(&format!("fill=\"{measured}\"")));
        assert!(!svg.contains(&format!("fill=\"{limit}\"")), "a marker in the limit's colour");
        assert!(svg.contains("link 100 Gb/s"));
    }

    #[test]
    fn the_legend_covers_no_point() {
        // Six series whose highest points are at the right, where the legend is.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("legend.svg");
        let series: Vec<Series> = (1..=6)
            .map(|i| Series::measured(format!("series {i}"), vec![(256.0, 1.0), (65536.0, 40.0 + f64::from(i))]))
            .collect();
        plot_svg(&path, "t", "bytes", "Gb/s", &series, true).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        // The legend's box is the one rectangle with a black border.
        let rect = svg
            .split("<rect")
            .skip(1)
            .map(|tail| &tail[..tail.find("/>").unwrap()])
            .find(|r| r.contains("stroke=\"#000000\""))
            .expect("a legend box");
        let attr = |tail: &str, name: &str| -> f64 {
            tail.split(&format!(" {name}=\"")).nth(1).unwrap().split('"').next().unwrap().parse().unwrap()
        };
        let legend_bottom = attr(rect, "y") + attr(rect, "height");
        let highest_point = svg.split("<circle").skip(1).map(|c| attr(c, "cy")).fold(f64::MAX, f64::min);
        assert!(
            highest_point > legend_bottom,
            "a point at y {highest_point} under the legend, down to {legend_bottom}"
        );
    }

    #[test]
    fn plot_refuses_what_it_cannot_draw() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.svg");
        let none = plot_svg(&path, "t", "x", "y", &[Series::measured("empty", vec![])], false);
        assert!(none.unwrap_err().to_string().contains("no points"));
        let zero = plot_svg(&path, "t", "x", "y", &[Series::measured("s", vec![(0.0, 1.0)])], true);
        assert!(zero.unwrap_err().to_string().contains("logarithmic"));
        let nan = plot_svg(&path, "t", "x", "y", &[Series::measured("s", vec![(1.0, f64::NAN)])], false);
        assert!(nan.unwrap_err().to_string().contains("not finite"));
    }
}
