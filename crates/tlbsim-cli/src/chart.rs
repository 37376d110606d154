//! Figures as SVG text, drawn with `plotters`: a line chart (one line per
//! series, linear or logarithmic axes, a legend beside the plot) for
//! `tlbsim plot`, and the published-vs-simulated bars of `reproduce
//! --report`. Output is deterministic: no timestamps, and each series'
//! color and marker follow from its index alone.
//!
//! SVG only: a bitmap (PNG) needs a rasterising font backend and a font
//! file, which this build does not carry.

use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;

/// Width of a line chart's plot area, in pixels (the legend is added).
const PLOT_W: u32 = 760;
/// Height of a line chart, in pixels.
const PLOT_H: u32 = 480;
/// The font family of every text.
const FONT: &str = "sans-serif";

/// Series colors (Tableau 10), by series index modulo their count.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// The color of series `i`.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The marker of series `i`: circles for the first ten series, then
/// triangles, then crosses, so that series sharing a color differ.
fn marker(i: usize) -> Marker {
    match (i / PALETTE.len()) % 3 {
        0 => Marker::Circle,
        1 => Marker::Triangle,
        _ => Marker::Cross,
    }
}

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Cross,
}

/// One line of a [`LineChart`]: a legend label and its points, drawn in
/// the order given (callers sort them by x).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's text for this line.
    pub label: String,
    /// `(x, y)` points, all finite (and positive on a logarithmic axis).
    pub points: Vec<(f64, f64)>,
}

/// A line chart: what [`line_chart_svg`] draws.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// The caption above the plot.
    pub title: String,
    /// The x axis' description.
    pub x_label: String,
    /// The y axis' description.
    pub y_label: String,
    /// A logarithmic x axis (every x must be positive).
    pub log_x: bool,
    /// A logarithmic y axis (every y must be positive).
    pub log_y: bool,
    /// The lines, in legend order; series `i` gets [`color`]`(i)`.
    pub series: Vec<Series>,
}

/// `v` with `digits` significant digits at most, in plain notation
/// between 1e-4 and 1e6 and scientific outside (`0.0125`, `2500`,
/// `1.5e9`): tick labels without floating-point noise such as
/// `0.30000000000000004`.
pub fn tick(v: f64, digits: usize) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let r: f64 = format!("{v:.*e}", digits.clamp(1, 17) - 1)
        .parse()
        .unwrap_or(v);
    if r != 0.0 && (r.abs() >= 1e6 || r.abs() < 1e-4) {
        format!("{r:e}")
    } else {
        format!("{r}")
    }
}

/// How many significant digits tell apart the ticks of a linear axis
/// over `r` (about ten ticks): 4, or more when the span is small against
/// the values (`5930` to `5933` needs 5).
fn digits(r: &Range<f64>) -> usize {
    let mag = r.start.abs().max(r.end.abs());
    // The values' leading digit down to the ticks' step's (span / 10).
    let need = mag.log10().floor() - ((r.end - r.start) / 10.0).log10().floor() + 1.0;
    if need.is_finite() {
        need.clamp(4.0, 15.0) as usize
    } else {
        4
    }
}

/// The largest magnitude an axis takes (plotters' tick arithmetic
/// overflows beyond), and the smallest positive value of a logarithmic one
/// (below, it underflows and never ends).
pub const AXIS_MAX: f64 = 1e300;
/// See [`AXIS_MAX`].
pub const LOG_AXIS_MIN: f64 = 1e-300;
/// Most decades a logarithmic axis spans: plotters' tick search never
/// ends when the ratio of its ends overflows.
pub const LOG_AXIS_DECADES: i32 = 200;

/// The axis range covering `values` with a margin: 5 % of the span on a
/// linear axis, 5 % of the decades (at most one) on a logarithmic one; a
/// single value
/// (or values equal but for a difference below 1e-12 of them, or below
/// 1e-280) gets a range around it. `None` when `values` is empty or holds
/// a value that is not finite, beyond [`AXIS_MAX`] in magnitude, or (on a
/// logarithmic axis, `log`) below [`LOG_AXIS_MIN`], or when a logarithmic
/// axis would span more than [`LOG_AXIS_DECADES`].
pub fn axis_range(values: impl Iterator<Item = f64>, log: bool) -> Option<Range<f64>> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        if !v.is_finite() || v.abs() > AXIS_MAX || (log && v < LOG_AXIS_MIN) {
            return None;
        }
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    if !log && hi - lo < (lo.abs().max(hi.abs()) * 1e-12).max(1e-280) {
        hi = lo;
    }
    let (a, b) = if log {
        // At most a decade, so that the range stays within normal floats.
        let f = if lo == hi {
            2.0
        } else {
            (hi / lo).powf(0.05).min(10.0)
        };
        (lo / f, hi * f)
    } else {
        let pad = if lo == hi {
            (lo.abs() * 0.1).max(1.0)
        } else {
            (hi - lo) * 0.05
        };
        (lo - pad, hi + pad)
    };
    let too_wide = log && b / a > 10f64.powi(LOG_AXIS_DECADES);
    (!too_wide).then_some(a..b)
}

/// Most labelled ticks on a logarithmic axis.
const LOG_TICKS_MAX: usize = 12;

/// The labelled ticks of a logarithmic axis over `r` showing `values`
/// (all positive), in increasing order, each distinct at four significant
/// digits:
/// - the values themselves when they are few whole numbers (CPU or VM
///   counts: 1, 2, 4, 8, 16, 32), thinned where two would crowd;
/// - otherwise 1, 2 and 5 of each decade in `r` (only powers of ten when
///   that gives too many, 1 to 9 when too few), with the smallest and
///   largest value added where the nearest tick is more than a factor 1.5
///   away (or when there are fewer than three ticks), so that both ends
///   of the data are labelled.
pub fn log_ticks(values: &[f64], r: &Range<f64>) -> Vec<f64> {
    let mut data: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
    data.sort_by(f64::total_cmp);
    data.dedup_by(|a, b| tick(*a, 4) == tick(*b, 4));
    let whole = data.iter().all(|v| v.fract() == 0.0);
    let mut ticks = if whole && !data.is_empty() && data.len() <= LOG_TICKS_MAX {
        data.clone()
    } else {
        decade_ticks(r)
    };
    if let (Some(&lo), Some(&hi)) = (data.first(), data.last()) {
        // A narrow range (fewer than three ticks) gets both ends.
        let few = ticks.len() < 3;
        if few || ticks.first().is_none_or(|&t| t / lo > 1.5) {
            ticks.insert(0, lo);
        }
        if few || ticks.last().is_none_or(|&t| hi / t > 1.5) {
            ticks.push(hi);
        }
    }
    ticks.sort_by(f64::total_cmp);
    ticks.dedup_by(|a, b| tick(*a, 4) == tick(*b, 4));
    thin(ticks)
}

/// 1, 2 and 5 times the powers of ten in `r`; only the powers when that
/// is more than [`LOG_TICKS_MAX`] (every second, third, ... power when
/// even those are); 1 to 9 times them when 1, 2 and 5 give fewer than 3.
fn decade_ticks(r: &Range<f64>) -> Vec<f64> {
    let (lo, hi) = (r.start.log10().floor() as i32, r.end.log10().ceil() as i32);
    let within = |mantissas: &[f64], every: i32| -> Vec<f64> {
        (lo..=hi)
            .filter(|e| e.rem_euclid(every) == 0)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| r.start <= *v && *v <= r.end)
            .collect()
    };
    let one_two_five = within(&[1.0, 2.0, 5.0], 1);
    if one_two_five.len() < 3 {
        return within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1);
    }
    if one_two_five.len() <= LOG_TICKS_MAX {
        return one_two_five;
    }
    let decades = (hi - lo).max(1) as usize;
    let every = decades.div_ceil(LOG_TICKS_MAX) as i32;
    within(&[1.0], every)
}

/// `ticks` without those closer than a factor 1.15 to the previous kept
/// one (their labels would overlap); the last one is always kept, in
/// place of its too-close predecessor.
fn thin(ticks: Vec<f64>) -> Vec<f64> {
    let mut kept: Vec<f64> = Vec::with_capacity(ticks.len());
    let n = ticks.len();
    for (i, t) in ticks.into_iter().enumerate() {
        match kept.last() {
            Some(&p) if t / p < 1.15 => {
                if i + 1 == n {
                    kept.pop();
                    kept.push(t);
                }
            }
            _ => kept.push(t),
        }
    }
    kept
}

/// The light grid lines of a logarithmic axis over `r`: 1 to 9 times
/// each power of ten in it (none when that would be more than 200 lines).
fn log_grid(r: &Range<f64>) -> Vec<f64> {
    let (lo, hi) = (r.start.log10().floor() as i32, r.end.log10().ceil() as i32);
    if hi - lo > 22 {
        return Vec::new();
    }
    (lo..=hi)
        .flat_map(|e| (1..=9).map(move |m| f64::from(m) * 10f64.powi(e)))
        .filter(|v| r.start <= *v && *v <= r.end)
        .collect()
}

/// `e` as the one-line error of a figure that could not be drawn.
fn draw_err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the figure: {e}")
}

/// The legend's width in pixels for labels of at most `chars` characters
/// (plotters' SVG text has no measured width; about 6.5 px a character
/// at 13 px).
fn legend_width(chars: usize) -> u32 {
    let w = 50 + 13 * chars.min(60) / 2;
    (w as u32).clamp(120, 480)
}

/// The chart as an SVG document. Errors: no series, no point, or an axis
/// whose values cannot be drawn (not finite; not positive on a log axis).
pub fn line_chart_svg(c: &LineChart) -> Result<String, String> {
    let all = || c.series.iter().flat_map(|s| s.points.iter());
    let xr = axis_range(all().map(|p| p.0), c.log_x);
    let yr = axis_range(all().map(|p| p.1), c.log_y);
    let (Some(xr), Some(yr)) = (xr, yr) else {
        return Err("no points that can be drawn on these axes".into());
    };
    let longest = c.series.iter().map(|s| s.label.chars().count()).max();
    let legend_w = legend_width(longest.unwrap_or(0));
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (PLOT_W + legend_w, PLOT_H)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (plot, legend) = root.split_horizontally(PLOT_W);
        let (dx, dy) = (digits(&xr), digits(&yr));
        let log_axis = |r: &Range<f64>, values: Vec<f64>| {
            let ticks = log_ticks(&values, r);
            r.clone()
                .log_scale()
                .with_key_points(ticks)
                .with_light_points(log_grid(r))
        };
        let (xs, ys) = (all().map(|p| p.0).collect(), all().map(|p| p.1).collect());
        match (c.log_x, c.log_y) {
            (false, false) => plot_lines(&plot, c, xr.clone(), yr.clone(), dx, dy)?,
            (true, false) => plot_lines(&plot, c, log_axis(&xr, xs), yr.clone(), 4, dy)?,
            (false, true) => plot_lines(&plot, c, xr.clone(), log_axis(&yr, ys), dx, 4)?,
            (true, true) => plot_lines(&plot, c, log_axis(&xr, xs), log_axis(&yr, ys), 4, 4)?,
        }
        draw_legend(&legend, &c.series)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// The plot part of [`line_chart_svg`] on the axes `x` and `y`: caption,
/// mesh, axis descriptions (tick labels with `dx` and `dy` significant
/// digits), one polyline per series with two points or more, and a marker
/// at every point.
fn plot_lines<X, Y>(
    area: &DrawingArea<SVGBackend, Shift>,
    c: &LineChart,
    x: X,
    y: Y,
    dx: usize,
    dy: usize,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, (FONT, 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_label_formatter(&|v| tick(*v, dx))
        .y_label_formatter(&|v| tick(*v, dy))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(draw_err)?;
    for (i, s) in c.series.iter().enumerate() {
        let style = ShapeStyle::from(color(i)).stroke_width(2);
        if s.points.len() > 1 {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(draw_err)?;
        }
        let fill = ShapeStyle::from(color(i)).filled();
        let pts = s.points.iter().copied();
        let drawn = match marker(i) {
            Marker::Circle => chart.draw_series(pts.map(|p| Circle::new(p, 3, fill))),
            Marker::Triangle => chart.draw_series(pts.map(|p| TriangleMarker::new(p, 4, fill))),
            Marker::Cross => chart.draw_series(pts.map(|p| Cross::new(p, 4, style))),
        };
        drawn.map_err(draw_err)?;
    }
    Ok(())
}

/// The legend beside the plot: per series, a swatch of its color, its
/// marker and its label, top to bottom in series order.
fn draw_legend(area: &DrawingArea<SVGBackend, Shift>, series: &[Series]) -> Result<(), String> {
    let text = TextStyle::from((FONT, 13).into_font()).color(&BLACK);
    for (i, s) in series.iter().enumerate() {
        let y = 48 + 22 * i as i32;
        let fill = ShapeStyle::from(color(i)).filled();
        area.draw(&Rectangle::new([(4, y - 2), (26, y + 2)], fill))
            .map_err(draw_err)?;
        let at = (15, y);
        match marker(i) {
            Marker::Circle => area.draw(&Circle::new(at, 3, fill)),
            Marker::Triangle => area.draw(&TriangleMarker::new(at, 4, fill)),
            Marker::Cross => area.draw(&Cross::new(at, 4, fill.stroke_width(2))),
        }
        .map_err(draw_err)?;
        let pos = (32, y - 7);
        area.draw(&Text::new(s.label.clone(), pos, text.clone()))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// One row of a [`bar_chart_svg`]: a published value (NaN: none) beside
/// a simulated one, in one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct BarRow {
    /// The row's label, above its bars.
    pub label: String,
    /// The published value; NaN when nothing is published (no bar).
    pub published: f64,
    /// The simulated value; not finite: no bar, the text says so.
    pub simulated: f64,
    /// The unit written after each value.
    pub unit: String,
    /// Where the bars start: 0, or 1 for ratios (bars then run right of
    /// a mark at 1 for values above it, left for values below).
    pub baseline: f64,
    /// The row misses its acceptance criterion: its label is drawn red.
    pub missed: bool,
}

/// Width of a bar chart, in pixels.
const BARS_W: u32 = 960;
/// Height of one row of a bar chart (label and two bars), in pixels.
const ROW_H: i32 = 54;
/// Where bars start, and their longest length, in pixels.
const BAR_X: i32 = 16;
const BAR_LEN: i32 = 600;
/// The published bars' color; the simulated ones are [`color`]`(0)`.
const PUBLISHED: RGBColor = RGBColor(0x9a, 0x9a, 0x9a);
/// The label color of a row that misses its criterion.
const MISSED: RGBColor = RGBColor(0xb0, 0x1c, 0x1c);

/// `v` in `unit` as the figure writes it: 4 significant digits (`2.17
/// s`, `6619 count`), `-` when not finite.
fn value_text(v: f64, unit: &str) -> String {
    if v.is_finite() {
        format!("{} {unit}", tick(v, 4))
    } else {
        "-".into()
    }
}

/// A horizontal bar chart of published vs simulated values, one row per
/// [`BarRow`] in order. The rows' units differ, so each row is scaled on
/// its own: the larger of its two values spans the full bar length, and
/// the numbers are written beside the bars. Rows with no published value
/// show only the simulated bar ("not published" in its place). Errors
/// only if drawing fails.
pub fn bar_chart_svg(title: &str, rows: &[BarRow]) -> Result<String, String> {
    let height = 84 + ROW_H * rows.len().max(1) as i32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (BARS_W, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let text = |size: i32| TextStyle::from((FONT, size).into_font()).color(&BLACK);
        root.draw(&Text::new(title.to_string(), (BAR_X, 10), text(18)))
            .map_err(draw_err)?;
        let key = "each row scaled to its larger value; ratios (x) drawn from 1";
        for (i, (name, c)) in [("published", PUBLISHED), ("simulated", color(0))]
            .into_iter()
            .enumerate()
        {
            let x = BAR_X + 110 * i as i32;
            root.draw(&Rectangle::new([(x, 44), (x + 14, 54)], c.filled()))
                .map_err(draw_err)?;
            root.draw(&Text::new(name, (x + 20, 42), text(13)))
                .map_err(draw_err)?;
        }
        root.draw(&Text::new(key, (BAR_X + 240, 42), text(13)))
            .map_err(draw_err)?;
        for (i, r) in rows.iter().enumerate() {
            draw_bar_row(&root, 70 + ROW_H * i as i32, r)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// One row of [`bar_chart_svg`] with its top at `y`.
fn draw_bar_row(area: &DrawingArea<SVGBackend, Shift>, y: i32, r: &BarRow) -> Result<(), String> {
    let ink = if r.missed { MISSED } else { BLACK };
    let text = TextStyle::from((FONT, 13).into_font()).color(&ink);
    area.draw(&Text::new(r.label.clone(), (BAR_X, y), text))
        .map_err(draw_err)?;
    let (origin, room) = bar_axis(r.baseline);
    if r.baseline != 0.0 {
        let mark = PathElement::new([(origin, y + 15), (origin, y + 48)], BLACK.stroke_width(1));
        area.draw(&mark).map_err(draw_err)?;
    }
    let scale = [r.published, r.simulated]
        .into_iter()
        .filter(|v| v.is_finite())
        .map(|v| (v - r.baseline).abs())
        .fold(0.0, f64::max);
    let error = (r.simulated - r.published) / r.published * 100.0;
    let error = if error.is_finite() {
        format!(" ({error:+.1} %)")
    } else {
        String::new()
    };
    let bars = [
        (r.published, PUBLISHED, 18, "published ".to_string(), ""),
        (r.simulated, color(0), 33, "simulated ".to_string(), &*error),
    ];
    for (v, c, dy, name, after) in bars {
        let len = if v.is_finite() && scale > 0.0 {
            ((v - r.baseline) / scale * f64::from(room)).round() as i32
        } else {
            0
        };
        let top = y + dy;
        if len != 0 {
            let ends = [(origin, top), (origin + len, top + 12)];
            area.draw(&Rectangle::new(ends, c.filled()))
                .map_err(draw_err)?;
        }
        let (label, ink) = if v.is_nan() && dy == 18 {
            ("not published".to_string(), PUBLISHED)
        } else {
            (format!("{name}{}{after}", value_text(v, &r.unit)), BLACK)
        };
        // Labels right of the bar, or of the whole axis around a baseline.
        let at = if r.baseline == 0.0 {
            origin + len.max(0)
        } else {
            BAR_X + BAR_LEN
        };
        let style = TextStyle::from((FONT, 13).into_font()).color(&ink);
        area.draw(&Text::new(label, (at + 6, top), style))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// Where a row's bars start and their longest length, in pixels: from
/// the left over the whole length for a baseline of 0, from the middle
/// over half of it (either way) otherwise.
fn bar_axis(baseline: f64) -> (i32, i32) {
    if baseline == 0.0 {
        (BAR_X, BAR_LEN)
    } else {
        (BAR_X + BAR_LEN / 2, BAR_LEN / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        axis_range, bar_chart_svg, digits, line_chart_svg, log_ticks, tick, BarRow, LineChart,
        Series,
    };

    #[test]
    fn ticks_have_no_floating_point_noise() {
        assert_eq!(tick(0.1 + 0.2, 4), "0.3");
        assert_eq!(tick(2500.0, 4), "2500");
        assert_eq!(tick(0.0125, 4), "0.0125");
        assert_eq!(tick(1.5e9, 4), "1.5e9");
        assert_eq!(tick(2e-5, 4), "2e-5");
        assert_eq!(tick(0.0, 4), "0");
        assert_eq!(tick(-3.0, 4), "-3");
        assert_eq!(tick(5932.5, 5), "5932.5");
        assert_eq!(digits(&(5930.0..5933.0)), 5);
        assert_eq!(digits(&(0.0..10.0)), 4);
    }

    #[test]
    fn axis_ranges_pad_and_survive_degenerate_values() {
        assert_eq!(axis_range([0.0, 10.0].into_iter(), false), Some(-0.5..10.5));
        assert_eq!(axis_range([5.0].into_iter(), false), Some(4.0..6.0));
        assert_eq!(axis_range([0.0, 0.0].into_iter(), false), Some(-1.0..1.0));
        assert_eq!(axis_range([4.0].into_iter(), true), Some(2.0..8.0));
        let r = axis_range([1.0, 100.0].into_iter(), true).unwrap();
        assert!(r.start < 1.0 && r.start > 0.7 && r.end > 100.0 && r.end < 130.0);
        // Equal but for rounding: one value.
        assert_eq!(
            axis_range([1.0, 1.0 + 1e-15].into_iter(), false),
            Some(0.0..2.0)
        );
        assert_eq!(axis_range([].into_iter(), false), None);
        assert_eq!(axis_range([0.0, 1.0].into_iter(), true), None);
        assert_eq!(axis_range([f64::NAN].into_iter(), false), None);
        assert_eq!(axis_range([-1e308, 1e308].into_iter(), false), None);
        assert_eq!(axis_range([5e-324].into_iter(), true), None);
        assert_eq!(axis_range([1e-100, 1e100].into_iter(), true), None);
        assert!(axis_range([1e-90, 1e90].into_iter(), true).is_some());
        assert_eq!(
            axis_range([5e-324, 1e-323].into_iter(), false),
            Some(-1.0..1.0)
        );
    }

    #[test]
    fn a_line_chart_has_a_polyline_per_series_and_the_labels() {
        let series = |label: &str, points: Vec<(f64, f64)>| Series {
            label: label.into(),
            points,
        };
        let mut c = LineChart {
            title: "t <&>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            log_y: false,
            series: vec![
                series("a", vec![(1.0, 1.0), (10.0, 2.0)]),
                series("b", vec![(2.0, 3.0)]),
            ],
        };
        let svg = line_chart_svg(&c).unwrap();
        assert_eq!(svg.matches("stroke-width=\"2\" points=").count(), 1);
        assert!(svg.contains("t &lt;&amp;&gt;") && svg.contains(">\na\n</text>"));
        assert_eq!(line_chart_svg(&c).unwrap(), svg, "deterministic");
        c.series.clear();
        assert!(line_chart_svg(&c).is_err());
    }

    #[test]
    fn bars_show_published_beside_simulated_and_only_simulated_when_unpublished() {
        let row = |published: f64, simulated: f64| BarRow {
            label: "r".into(),
            published,
            simulated,
            unit: "s".into(),
            baseline: 0.0,
            missed: false,
        };
        let bars = |svg: &str| svg.matches("<rect").count() - 3; // background, key
        let svg = bar_chart_svg("t", &[row(2.0, 1.0)]).unwrap();
        assert_eq!(bars(&svg), 2);
        assert!(svg.contains("published 2 s") && svg.contains("simulated 1 s (-50.0 %)"));
        let svg = bar_chart_svg("t", &[row(f64::NAN, 1.0), row(0.0, 0.0)]).unwrap();
        assert_eq!(
            bars(&svg),
            1,
            "no bar for nothing published, none of length 0"
        );
        assert!(svg.contains("not published") && svg.contains("simulated 0 s"));
        assert!(bar_chart_svg("t", &[]).is_ok());
    }

    /// The widths of the bars (every `<rect>` but the background and the
    /// key's two), in drawing order.
    fn bar_widths(svg: &str) -> Vec<u32> {
        svg.split("<rect")
            .skip(1)
            .filter_map(|r| r.split("width=\"").nth(1)?.split('"').next()?.parse().ok())
            .skip(3)
            .collect()
    }

    #[test]
    fn ratio_bars_start_at_one() {
        // tcmalloc: 1.094x published, 1.009x simulated. From 0 the bars
        // were 600 and 553 px long; from 1 the change shows (600 / 2 and
        // 0.009 / 0.094 of it).
        let row = BarRow {
            label: "ratio".into(),
            published: 1.094,
            simulated: 1.0088,
            unit: "x".into(),
            baseline: 1.0,
            missed: true,
        };
        let svg = bar_chart_svg("t", std::slice::from_ref(&row)).unwrap();
        assert_eq!(bar_widths(&svg), [300, 28], "{svg}");
        // Below 1, the bar runs left of the mark at 1, as long as the change.
        let below = BarRow {
            published: 0.5,
            simulated: 1.25,
            ..row
        };
        let svg = bar_chart_svg("t", &[below]).unwrap();
        assert_eq!(bar_widths(&svg), [300, 150], "{svg}");
        assert!(svg.contains("published 0.5 x") && svg.contains("simulated 1.25 x (+150.0 %)"));
    }

    /// The tick labels of an axis: the texts anchored `anchor` (`middle`
    /// under the x axis, `end` left of the y axis) that are numbers.
    fn labels(svg: &str, anchor: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter(|t| t.contains(&format!("text-anchor=\"{anchor}\"")))
            .filter_map(|t| {
                let text = t.split_once('>')?.1.split("</text>").next()?.trim();
                text.parse::<f64>().is_ok().then(|| text.to_string())
            })
            .collect()
    }

    #[test]
    fn log_axes_label_each_cpu_count_once_and_both_ends() {
        // A scaling curve: CPUs 1 to 32, elapsed 0.1 to 20 s. Before, the
        // x axis labelled 1 to 9, 10 twice, 20 and 30 (not 16 or 32), and
        // small ranges labelled 0.1 twice.
        let c = LineChart {
            title: "t".into(),
            x_label: "cpus".into(),
            y_label: "elapsed_s".into(),
            log_x: true,
            log_y: true,
            series: vec![Series {
                label: "a".into(),
                points: vec![
                    (1.0, 0.1),
                    (2.0, 0.3),
                    (4.0, 1.2),
                    (8.0, 3.5),
                    (16.0, 9.0),
                    (32.0, 20.0),
                ],
            }],
        };
        let svg = line_chart_svg(&c).unwrap();
        assert_eq!(labels(&svg, "middle"), ["1", "2", "4", "8", "16", "32"]);
        assert_eq!(
            labels(&svg, "end"),
            ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20"]
        );
        // A narrow range: 0.1 to 0.14 gets its ends, each once.
        let r = axis_range([0.1, 0.12, 0.14].into_iter(), true).unwrap();
        assert_eq!(log_ticks(&[0.1, 0.12, 0.14], &r), [0.1, 0.14]);
        // Many decades: powers of ten only, at most a dozen.
        let r = axis_range([1e-3, 1e9].into_iter(), true).unwrap();
        let t = log_ticks(&[1e-3, 2.5e-3, 1e9], &r);
        assert!(
            t.len() <= 13 && t.first() == Some(&1e-3) && t.last() == Some(&1e9),
            "{t:?}"
        );
        // Many whole values: decade ticks, ends labelled.
        let many: Vec<f64> = (1..=40).map(f64::from).collect();
        let r = axis_range(many.iter().copied(), true).unwrap();
        assert_eq!(log_ticks(&many, &r), [1.0, 2.0, 5.0, 10.0, 20.0, 40.0]);
    }
}
