//! `turnstile loadtest --plot FILE.svg`: turn latency over the run (every kept reply as a dot,
//! with the p50 and p99 of each time slice as lines) and a histogram of all turn latencies,
//! drawn with `plotters` into one SVG file. Both latency axes are logarithmic: a run's tail is
//! often a hundred times its median.

use std::path::Path;

use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;

use super::{Report, Timeline};

/// Size of the picture, in pixels.
const WIDTH: u32 = 1000;
const HEIGHT: u32 = 760;
/// Time slices for the p50/p99 lines.
const SLICES: usize = 60;
/// Histogram bars (logarithmically spaced).
const BINS: usize = 40;
/// Most dots drawn (evenly chosen from the timeline); more only make the file heavy.
const MAX_DOTS: usize = 5_000;

/// Why a plot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Drawing or writing the file failed.
    #[error("could not draw the plot into {path}: {message}")]
    Draw {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// No reply arrived, so there is nothing to plot.
    #[error("no replies were measured; nothing to plot")]
    Empty,
}

/// Writes the plot of a run to `path` (SVG).
pub fn write_svg(path: &Path, report: &Report, timeline: &Timeline) -> Result<(), PlotError> {
    if timeline.points().is_empty() || timeline.histogram().is_empty() {
        return Err(PlotError::Empty);
    }
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let (top, bottom) = root.split_vertically(HEIGHT * 55 / 100);
    over_time(&top, report, timeline).map_err(|e| draw_err(&e))?;
    histogram(&bottom, timeline).map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult =
    Result<(), DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>>;

/// The latency range to show: from the smallest to the largest point, widened to whole
/// decades' edges so the log axis has labels.
fn latency_range(low: f64, high: f64) -> (f64, f64) {
    let low = low.max(0.001);
    let high = high.max(low * 1.5);
    (low / 1.2, high * 1.2)
}

fn over_time(area: &Area<'_>, report: &Report, timeline: &Timeline) -> DrawResult {
    let points = timeline.points();
    let span = points
        .iter()
        .map(|p| p.at_seconds)
        .fold(0.0f64, f64::max)
        .max(0.001);
    let (lo, hi) = points.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
        (lo.min(p.latency_ms), hi.max(p.latency_ms))
    });
    let (lo, hi) = latency_range(lo, hi);
    let title = format!(
        "turn latency over time — {} replies, p50 {:.1} ms, p99 {:.1} ms, {:.0} turns/s",
        report.replied,
        report.turn_latency.p50_ms,
        report.turn_latency.p99_ms,
        report.turns_per_second
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..span * 1.02, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .x_desc("seconds since the start (message sent)")
        .y_desc("send → reply (ms)")
        .draw()?;
    let step = points.len().div_ceil(MAX_DOTS).max(1);
    chart.draw_series(
        points
            .iter()
            .step_by(step)
            .map(|p| Circle::new((p.at_seconds, p.latency_ms), 2, BLUE.mix(0.4).filled())),
    )?;
    let (p50, p99) = slice_percentiles(timeline, span);
    chart
        .draw_series(LineSeries::new(p50, GREEN.stroke_width(2)))?
        .label("p50 per slice")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREEN.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(p99, RED.stroke_width(2)))?
        .label("p99 per slice")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Points of a line: (seconds, ms).
type Line = Vec<(f64, f64)>;

/// The p50 and p99 of the points in each of [`SLICES`] equal time slices (slices without
/// points are skipped).
fn slice_percentiles(timeline: &Timeline, span: f64) -> (Line, Line) {
    let mut slices: Vec<Vec<f64>> = vec![Vec::new(); SLICES];
    for p in timeline.points() {
        let i = ((p.at_seconds / span) * SLICES as f64) as usize;
        slices[i.min(SLICES - 1)].push(p.latency_ms);
    }
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    for (i, mut s) in slices.into_iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        s.sort_by(f64::total_cmp);
        let at = (i as f64 + 0.5) * span / SLICES as f64;
        let q = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        p50.push((at, q(0.50)));
        p99.push((at, q(0.99)));
    }
    (p50, p99)
}

fn histogram(area: &Area<'_>, timeline: &Timeline) -> DrawResult {
    let h = timeline.histogram();
    let (lo, hi) = latency_range(h.min() as f64 / 1_000.0, h.max() as f64 / 1_000.0);
    // Logarithmic bins: edges lo × r^i.
    let ratio = (hi / lo).powf(1.0 / BINS as f64);
    let mut counts = [0u64; BINS];
    for v in h.iter_recorded() {
        let ms = v.value_iterated_to() as f64 / 1_000.0;
        let i = ((ms / lo).ln() / ratio.ln()).floor();
        let i = if i.is_finite() && i > 0.0 {
            i as usize
        } else {
            0
        };
        counts[i.min(BINS - 1)] += v.count_at_value();
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("turn latency histogram — {} replies", h.len()),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d((lo..hi).log_scale(), 0u64..top + top / 10 + 1)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(240, 240, 240))
        .x_desc("send → reply (ms)")
        .y_desc("replies")
        .draw()?;
    chart.draw_series(
        counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let left = lo * ratio.powi(i as i32);
                let right = left * ratio;
                Rectangle::new([(left, 0), (right, *c)], BLUE.mix(0.6).filled())
            }),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn report() -> Report {
        Report {
            target: "test".into(),
            sessions: 1,
            messages_per_session: 1,
            concurrency: 1,
            sent: 0,
            accepted: 0,
            dropped: 0,
            replied: 0,
            turns: 0,
            unanswered: 0,
            errors: Default::default(),
            send_seconds: 1.0,
            total_seconds: 1.0,
            accepted_per_second: 0.0,
            replies_per_second: 0.0,
            turns_per_second: 0.0,
            ack_latency: Default::default(),
            turn_latency: Default::default(),
            rss_bytes: None,
        }
    }

    #[test]
    fn a_run_becomes_an_svg_with_both_panels() {
        let mut t = Timeline::new(super::super::histogram());
        for i in 0..2_000u64 {
            // A slow tail every 50th reply.
            let ms = if i % 50 == 0 { 400 } else { 2 + i % 7 };
            t.record(Duration::from_millis(i * 5), Duration::from_millis(ms));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        write_svg(&path, &report(), &t).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("turn latency over time"));
        assert!(svg.contains("turn latency histogram"));
        assert!(svg.contains("<circle"), "the dots");
        assert!(svg.contains("<polyline"), "the p50/p99 lines");
        assert!(svg.contains("<rect"), "the histogram bars");
    }

    #[test]
    fn nothing_measured_is_an_error_not_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        let t = Timeline::new(super::super::histogram());
        assert!(matches!(
            write_svg(&path, &report(), &t),
            Err(PlotError::Empty)
        ));
        assert!(!path.exists());
    }
}
