//! The overview's time-series charts, laid out by `plotters` on a real time axis.
//!
//! plotters computes the ranges, the round tick positions (in the operator's zone) and the
//! axes; a small drawing backend records what it draws as typed shapes
//! ([`fenceline_app::svg::Shape`]) instead of SVG text. So the colours are CSS classes (each
//! series and each role is drawn in a sentinel colour that the backend maps back to its
//! class), which keeps light and dark themes both right, and every label reaches the page as
//! text that Leptos escapes.
//!
//! Series are drawn side by side as lines, never stacked or summed: the y axis tops out at the
//! largest single value. Buckets are aligned to the clock of the zone shown (5-minute buckets
//! start at :00, :05…), so their edges stay put from one refresh to the next.

use std::convert::Infallible;

use chrono::{DateTime, Offset};
use fenceline_app::console::Window;
use fenceline_app::svg::{Anchor, Shape, Svg};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
};

use crate::time::{human_duration, in_zone, Tz};

/// A chart's width (SVG units) where it has room, and on a phone: each is drawn no smaller
/// than its width, so its 11-unit text is at least 11 px on screen.
pub const WIDE: u32 = 480;
pub const NARROW: u32 = 280;
const HEIGHT: u32 = 230;
const FONT: f64 = 11.0;

/// The buckets of a chart window: `count` buckets of `width` µs from `start`, the last one
/// holding `now`, with edges on round times of `zone`'s clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buckets {
    pub start: i64,
    pub width: i64,
    pub count: usize,
    pub now: i64,
    pub zone: Tz,
    pub window: Window,
}

impl Buckets {
    /// The buckets that show `window` up to `now`.
    pub fn of(window: Window, now: i64, zone: Tz) -> Buckets {
        let (width_s, count) = match window {
            Window::Hour => (300, 12),
            Window::Day => (3_600, 24),
            Window::Week => (6 * 3_600, 28),
        };
        let width = width_s * 1_000_000;
        // Align to the zone's wall clock: a 6-hour bucket starts at 00:00, 06:00… local time.
        let offset = in_zone(now, zone).offset().fix().local_minus_utc() as i64 * 1_000_000;
        let current = (now + offset).div_euclid(width) * width - offset;
        Buckets {
            start: current - (count as i64 - 1) * width,
            width,
            count,
            now,
            zone,
            window,
        }
    }

    /// The end of the last bucket.
    pub fn end(&self) -> i64 {
        self.start + self.width * self.count as i64
    }

    fn edge(&self, i: usize) -> i64 {
        self.start + self.width * i as i64
    }

    /// Which bucket `at` falls in, if any.
    #[cfg(test)]
    fn index(&self, at: i64) -> Option<usize> {
        (at >= self.start)
            .then(|| ((at - self.start) / self.width) as usize)
            .filter(|i| *i < self.count)
    }
}

/// One line of a chart: what it counts, its CSS class, one count per bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub class: String,
    pub counts: Vec<i64>,
}

impl Series {
    pub fn new(label: &str, class: &str, counts: Vec<i64>) -> Series {
        Series {
            label: label.into(),
            class: class.into(),
            counts,
        }
    }
}

/// The smallest round value at or above `max` (at least 4), for the top of a count axis.
pub fn nice_ceiling(max: i64) -> i64 {
    let max = max.max(4);
    let mut scale = 1;
    loop {
        for step in [1, 2, 3, 4, 5, 6, 8, 10] {
            if step * scale >= max {
                return step * scale;
            }
        }
        scale *= 10;
    }
}

/// Sentinel colours: plotters draws each role in one, the backend maps it to a class.
const INK: RGBColor = RGBColor(2, 0, 0);
const GRID: RGBColor = RGBColor(2, 0, 1);
const NOW: RGBColor = RGBColor(2, 0, 2);

fn series_colour(i: usize) -> RGBColor {
    RGBColor(1, 0, i as u8)
}

/// A plotters backend that keeps what is drawn as typed shapes.
struct Shapes<'a> {
    out: &'a mut Vec<Shape>,
    classes: Vec<String>,
    width: u32,
}

impl Shapes<'_> {
    /// The CSS class a colour stands for; `None` for a transparent one, which draws nothing.
    fn class(&self, colour: BackendColor) -> Option<String> {
        if colour.alpha == 0.0 {
            return None;
        }
        Some(match colour.rgb {
            (1, 0, i) => self
                .classes
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| "ink".into()),
            (2, 0, 1) => "grid".into(),
            (2, 0, 2) => "now".into(),
            _ => "ink".into(),
        })
    }
}

fn f((x, y): BackendCoord) -> (f64, f64) {
    (f64::from(x), f64::from(y))
}

impl DrawingBackend for Shapes<'_> {
    type ErrorType = Infallible;

    fn get_size(&self) -> (u32, u32) {
        (self.width, HEIGHT)
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let (x, y) = f(point);
        let Some(class) = self.class(color) else {
            return Ok(());
        };
        self.out.push(Shape::Rect {
            x,
            y,
            width: 1.0,
            height: 1.0,
            rx: 0.0,
            class,
            title: None,
        });
        Ok(())
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let ((x1, y1), (x2, y2)) = (f(from), f(to));
        let Some(class) = self.class(style.color()) else {
            return Ok(());
        };
        self.out.push(Shape::Line {
            x1,
            y1,
            x2,
            y2,
            class,
        });
        Ok(())
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let ((x0, y0), (x1, y1)) = (f(upper_left), f(bottom_right));
        let Some(class) = self.class(style.color()) else {
            return Ok(());
        };
        self.out.push(Shape::Rect {
            x: x0.min(x1),
            y: y0.min(y1),
            width: (x1 - x0).abs(),
            height: (y1 - y0).abs(),
            rx: 0.0,
            class: if fill {
                class
            } else {
                format!("outline {class}")
            },
            title: None,
        });
        Ok(())
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let Some(class) = self.class(style.color()) else {
            return Ok(());
        };
        self.out.push(Shape::Polyline {
            points: path.into_iter().map(f).collect(),
            class,
        });
        Ok(())
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        _fill: bool,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let (cx, cy) = f(center);
        let Some(class) = self.class(style.color()) else {
            return Ok(());
        };
        self.out.push(Shape::Circle {
            cx,
            cy,
            r: f64::from(radius),
            class,
            title: None,
        });
        Ok(())
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        self.draw_path(vert, style)
    }

    fn draw_text<TStyle: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &TStyle,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        let (x, y) = f(pos);
        let size = style.size();
        let anchor = style.anchor();
        // SVG places text by its baseline; plotters by the anchor's box edge.
        let y = match anchor.v_pos {
            VPos::Top => y + size * 0.8,
            VPos::Center => y + size * 0.35,
            VPos::Bottom => y,
        };
        let Some(class) = self.class(style.color()) else {
            return Ok(());
        };
        self.out.push(Shape::Text {
            x,
            y,
            anchor: match anchor.h_pos {
                HPos::Left => Anchor::Start,
                HPos::Center => Anchor::Middle,
                HPos::Right => Anchor::End,
            },
            class,
            text: text.to_owned(),
            title: None,
        });
        Ok(())
    }

    fn estimate_text_size<TStyle: BackendTextStyle>(
        &self,
        text: &str,
        style: &TStyle,
    ) -> Result<(u32, u32), DrawingErrorKind<Infallible>> {
        let size = style.size();
        Ok((
            (text.chars().count() as f64 * size * 0.56).ceil() as u32,
            size.ceil() as u32,
        ))
    }

    fn blit_bitmap(
        &mut self,
        _pos: BackendCoord,
        _size: (u32, u32),
        _src: &[u8],
    ) -> Result<(), DrawingErrorKind<Infallible>> {
        Ok(())
    }
}

/// A tick label on the time axis: times of day, and the date where a day starts.
fn tick_label(at: &DateTime<Tz>, window: Window) -> String {
    use chrono::Timelike;
    let midnight = at.hour() == 0 && at.minute() == 0;
    match window {
        Window::Week => at.format("%a %-d").to_string(),
        _ if midnight => at.format("%-d %b").to_string(),
        _ => at.format("%H:%M").to_string(),
    }
}

/// What the x axis covers, said once under it: `1 Dec 2026 09:10 – 10:10 UTC · 5m buckets`
/// (without the year on a narrow chart).
fn axis_caption(b: &Buckets, width: u32) -> String {
    let (from, to) = (in_zone(b.start, b.zone), in_zone(b.end(), b.zone));
    let from_format = if width < WIDE {
        "%-d %b %H:%M"
    } else {
        "%-d %b %Y %H:%M"
    };
    let to_format = if from.date_naive() == to.date_naive() {
        "%H:%M %Z"
    } else {
        "%-d %b %H:%M %Z"
    };
    if width < WIDE {
        // Each bucket's span is in its tooltip.
        return format!("{} – {}", from.format(from_format), to.format(to_format));
    }
    format!(
        "{} – {} · {} buckets",
        from.format(from_format),
        to.format(to_format),
        super::charts::round_span(b.width)
    )
}

/// Digits of the axis font are about this wide, in em (DejaVu Sans, the usual sans-serif
/// here, draws them at 0.636 em).
const DIGIT_EM: f64 = 0.64;

/// Room for the count axis's labels: the widest, `top`, with the tick and a margin, so that a
/// count of thousands is not cut at the chart's edge.
fn y_label_width(top: i64) -> u32 {
    let digits = top.max(1).to_string().len() as f64;
    ((digits * FONT * DIGIT_EM) as u32 + 14).max(36)
}

/// The legend's rows: where each entry goes in the strip above the plot.
fn legend_layout(series: &[Series], width: u32) -> (Vec<(i32, i32)>, u32) {
    let chart_width = width;
    let (mut x, mut row) = (8i32, 0i32);
    let mut places = Vec::with_capacity(series.len());
    for s in series {
        let width = 28 + (s.label.chars().count() as f64 * FONT * 0.56) as i32 + 14;
        if x + width > chart_width as i32 - 4 && x > 8 {
            x = 8;
            row += 1;
        }
        places.push((x, 4 + row * 16));
        x += width;
    }
    (places, 8 + 16 * (row as u32 + 1))
}

fn draw(
    root: &DrawingArea<Shapes<'_>, Shift>,
    b: &Buckets,
    series: &[Series],
    hover: &mut Vec<(f64, f64, f64, f64)>,
) -> Result<(), DrawingAreaErrorKind<Infallible>> {
    let font = ("sans-serif", FONT).into_font();
    let width = root.dim_in_pixel().0;
    let (places, legend_height) = legend_layout(series, width);
    let (legend, plot) = root.split_vertically(legend_height);
    for (i, (s, (x, y))) in series.iter().zip(places).enumerate() {
        // A stretch of the series' own line, so a dashed one is dashed here too.
        legend.draw(&PathElement::new(
            vec![(x, y + 7), (x + 20, y + 7)],
            Color::stroke_width(&series_colour(i), 2),
        ))?;
        legend.draw(&Text::new(
            s.label.clone(),
            (x + 25, y),
            font.clone().color(&INK),
        ))?;
    }
    let top = nice_ceiling(
        series
            .iter()
            .flat_map(|s| &s.counts)
            .copied()
            .max()
            .unwrap_or(0),
    );
    let zone = b.zone;
    let (from, to) = (in_zone(b.start, zone), in_zone(b.end(), zone));
    let mut chart = ChartBuilder::on(&plot)
        .margin_right(12)
        .margin_top(4)
        // The caption sits on the label area's floor: room below it for its descenders.
        .margin_bottom(4)
        .x_label_area_size(34)
        .y_label_area_size(y_label_width(top))
        .build_cartesian_2d(from..to, 0i64..top)?;
    let window = b.window;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .axis_style(INK)
        .x_labels(if width < WIDE { 4 } else { 6 })
        .y_labels(5)
        .x_label_formatter(&|t| tick_label(t, window))
        .y_label_formatter(&|n| n.to_string())
        .x_desc(axis_caption(b, width))
        .label_style(font.clone().color(&INK))
        .axis_desc_style(font.clone().color(&INK))
        .draw()?;
    // The current bucket is still filling: a line marks now.
    let now = in_zone(b.now, zone);
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(now, 0), (now, top)],
        NOW,
    )))?;
    let mid = |i: usize| in_zone(b.edge(i) + b.width / 2, zone);
    // Lines last to first: the first series (jobs accepted, dashed by the stylesheet) lies on
    // top, so a series equal to it (every accepted job succeeded) cannot hide it.
    for (i, s) in series.iter().enumerate().rev() {
        chart.draw_series(LineSeries::new(
            s.counts.iter().enumerate().map(|(k, n)| (mid(k), *n)),
            Color::stroke_width(&series_colour(i), 2),
        ))?;
    }
    for (i, s) in series.iter().enumerate() {
        let colour = series_colour(i);
        chart.draw_series(
            s.counts
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| Circle::new((mid(k), *n), 2, colour.filled())),
        )?;
    }
    // Where each bucket is, for its tooltip.
    let area = chart.plotting_area();
    for i in 0..b.count {
        let (x0, y0) = area.map_coordinate(&(in_zone(b.edge(i), zone), top));
        let (x1, y1) = area.map_coordinate(&(in_zone(b.edge(i + 1), zone), 0));
        hover.push((f64::from(x0), f64::from(y0), f64::from(x1), f64::from(y1)));
    }
    Ok(())
}

/// The tooltip of bucket `i`: its time span and every series' count in it.
fn bucket_title(b: &Buckets, i: usize, series: &[Series]) -> String {
    let (from, to) = (in_zone(b.edge(i), b.zone), in_zone(b.edge(i + 1), b.zone));
    let span = format!(
        "{} – {}",
        from.format("%-d %b %H:%M"),
        to.format("%H:%M %Z")
    );
    let counts = series
        .iter()
        .map(|s| format!("{}: {}", s.label, s.counts.get(i).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(" · ");
    let partial = if b.now < b.edge(i + 1) {
        " (so far)"
    } else {
        ""
    };
    format!("{span}{partial}\n{counts}")
}

/// The CSS class of the `i`th of `n` series: the first of several, drawn on top, is `on-top`
/// too, which the stylesheet dashes (line and key alike), so a series equal to it shows
/// through its gaps instead of hiding under it.
pub fn series_class(series: &Series, i: usize, n: usize) -> String {
    if i == 0 && n > 1 {
        format!("{} on-top", series.class)
    } else {
        series.class.clone()
    }
}

/// A chart of `series` over the buckets `b`, one line per series, `width` units wide.
pub fn time_series(b: &Buckets, series: &[Series], width: u32) -> Svg {
    let mut shapes = Vec::new();
    let mut hover = Vec::new();
    {
        let backend = Shapes {
            out: &mut shapes,
            classes: series
                .iter()
                .enumerate()
                .map(|(i, s)| series_class(s, i, series.len()))
                .collect(),
            width,
        };
        let root = backend.into_drawing_area();
        // The backend cannot fail: its error type is uninhabited.
        let _ = draw(&root, b, series, &mut hover);
    }
    for (i, (x0, y0, x1, y1)) in hover.into_iter().enumerate() {
        shapes.push(Shape::Rect {
            x: x0,
            y: y0,
            width: (x1 - x0).max(1.0),
            height: (y1 - y0).max(1.0),
            rx: 0.0,
            class: "hover".into(),
            title: Some(bucket_title(b, i, series)),
        });
    }
    Svg {
        width: f64::from(width),
        height: f64::from(HEIGHT),
        label: format!(
            "{} per {} bucket",
            series
                .iter()
                .map(|s| s.label.clone())
                .collect::<Vec<_>>()
                .join(", "),
            human_duration(b.width)
        ),
        class: "plot".into(),
        shapes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000_000;

    fn at(text: &str) -> i64 {
        crate::time::parse_instant(text).unwrap().timestamp_micros()
    }

    #[test]
    fn buckets_are_aligned_to_the_clock_and_stay_put_between_refreshes() {
        let utc = chrono_tz::UTC;
        let a = Buckets::of(Window::Hour, at("2026-12-01T10:07:13"), utc);
        let b = Buckets::of(Window::Hour, at("2026-12-01T10:09:59"), utc);
        assert_eq!(a.start, b.start, "same buckets within one 5-minute slot");
        assert_eq!(a.start, at("2026-12-01T09:10:00"));
        assert_eq!(a.width, 5 * MIN);
        assert_eq!(a.index(a.now), Some(11), "the last bucket holds now");
        assert_eq!(a.end(), at("2026-12-01T10:10:00"));
        // A 6-hour bucket starts at local 00/06/12/18 in the zone shown.
        let ny = chrono_tz::America::New_York;
        let week = Buckets::of(Window::Week, at("2026-12-01T10:07:13"), ny);
        let local = in_zone(week.start, ny);
        assert_eq!(local.format("%H:%M").to_string(), "06:00", "{local}");
        assert_eq!(
            in_zone(week.edge(27), ny).format("%H:%M").to_string(),
            "00:00",
            "the current 6-hour bucket began at local midnight"
        );
        assert_eq!(week.count, 28);
        let day = Buckets::of(
            Window::Day,
            at("2026-12-01T10:07:13"),
            chrono_tz::Asia::Kolkata,
        );
        assert_eq!(
            in_zone(day.start, chrono_tz::Asia::Kolkata)
                .format("%M")
                .to_string(),
            "00"
        );
    }

    #[test]
    fn round_ceilings() {
        assert_eq!(nice_ceiling(0), 4);
        assert_eq!(nice_ceiling(6), 6);
        assert_eq!(nice_ceiling(7), 8);
        assert_eq!(nice_ceiling(112), 200);
        assert_eq!(nice_ceiling(102), 200);
        assert_eq!(nice_ceiling(1_000), 1_000);
    }

    /// The classes of the series' lines (one point a bucket of the hour), in drawing order.
    fn series_lines(svg: &Svg) -> Vec<&str> {
        svg.shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Polyline { class, points } if points.len() == 12 => Some(class.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Each legend entry is a stretch of its series' line, in the series' class, so the
    /// stylesheet draws it as it draws the line (the accepted line dashed).
    #[test]
    fn the_legend_shows_each_series_as_its_line() {
        let b = Buckets::of(Window::Hour, at("2026-12-01T10:07:13"), chrono_tz::UTC);
        let svg = time_series(
            &b,
            &[
                Series::new("accepted", "c-created", vec![1; 12]),
                Series::new("succeeded", "c-succeeded", vec![1; 12]),
            ],
            WIDE,
        );
        let keys: Vec<&str> = svg
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Polyline { class, points } if points.len() == 2 => Some(class.as_str()),
                _ => None,
            })
            .filter(|class| class.starts_with("c-"))
            .collect();
        assert_eq!(keys, ["c-created on-top", "c-succeeded"]);
        assert!(!svg
            .shapes
            .iter()
            .any(|s| matches!(s, Shape::Rect { class, .. } if class.starts_with("c-"))));
    }

    /// A count axis of thousands leaves room for its widest label left of the plot.
    #[test]
    fn the_count_axis_has_room_for_its_widest_label() {
        let b = Buckets::of(Window::Hour, at("2026-12-01T10:07:13"), chrono_tz::UTC);
        for top in [4, 40, 6_000, 120_000] {
            let svg = time_series(
                &b,
                &[Series::new("accepted", "c-created", vec![top; 12])],
                WIDE,
            );
            let label = nice_ceiling(top).to_string();
            let x = svg
                .shapes
                .iter()
                .find_map(|s| match s {
                    Shape::Text { x, text, .. } if *text == label => Some(*x),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("no label {label}"));
            let width = label.len() as f64 * FONT * DIGIT_EM;
            assert!(x - width >= 2.0, "{label} ends at {x}, {width} wide");
        }
    }

    fn texts(svg: &Svg) -> Vec<String> {
        svg.texts().into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn distinct_series_are_drawn_apart_never_summed() {
        let b = Buckets::of(Window::Hour, at("2026-12-01T10:07:13"), chrono_tz::UTC);
        let mut accepted = vec![0; 12];
        let mut finished = vec![0; 12];
        accepted[3] = 112;
        finished[3] = 102;
        let svg = time_series(
            &b,
            &[
                Series::new("accepted", "c-created", accepted),
                Series::new("succeeded", "c-succeeded", finished),
            ],
            WIDE,
        );
        let texts = texts(&svg);
        // The axis tops out at a round value over the largest single count (112), not at
        // their sum (214).
        assert!(texts.contains(&"200".to_owned()), "{texts:?}");
        assert!(
            !texts.iter().any(|t| t == "214" || t == "250" || t == "300"),
            "{texts:?}"
        );
        // A legend names each series, and each has its own line in its own class.
        assert!(texts.contains(&"accepted".to_owned()));
        assert!(texts.contains(&"succeeded".to_owned()));
        let lines = series_lines(&svg);
        assert_eq!(lines, ["c-succeeded", "c-created on-top"]);
        // The two points of bucket 3 sit at different heights.
        let heights: Vec<f64> = svg
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Circle { cy, .. } => Some(*cy),
                _ => None,
            })
            .collect();
        assert_eq!(heights.len(), 2);
        assert!(
            heights[0] < heights[1],
            "112 is drawn above 102: {heights:?}"
        );
    }

    #[test]
    fn the_first_series_is_drawn_last_so_an_equal_one_cannot_hide_it() {
        // Every job accepted also succeeded: the two lines coincide. The first series (jobs
        // accepted, dashed by the stylesheet) is drawn on top, so both stay visible.
        let b = Buckets::of(Window::Hour, at("2026-12-01T10:07:13"), chrono_tz::UTC);
        let counts = vec![0, 0, 4, 7, 0, 0, 0, 0, 0, 0, 3, 1];
        let svg = time_series(
            &b,
            &[
                Series::new("accepted", "c-created", counts.clone()),
                Series::new("succeeded", "c-succeeded", counts),
                Series::new("failed", "c-failed", vec![0; 12]),
            ],
            WIDE,
        );
        let lines = series_lines(&svg);
        assert_eq!(lines.last(), Some(&"c-created on-top"), "{lines:?}");
        assert_eq!(lines.len(), 3);
        // So in any chart of several series, redeliveries and duplicates suppressed alike; a
        // chart of one has nothing to show through.
        let svg = time_series(
            &b,
            &[
                Series::new("redeliveries", "c-redelivery", vec![2; 12]),
                Series::new("duplicates suppressed", "c-suppressed", vec![2; 12]),
            ],
            WIDE,
        );
        assert_eq!(series_lines(&svg), ["c-suppressed", "c-redelivery on-top"]);
        let svg = time_series(
            &b,
            &[Series::new("rejected", "c-rejected", vec![2; 12])],
            WIDE,
        );
        assert_eq!(series_lines(&svg), ["c-rejected"]);
    }

    #[test]
    fn the_time_axis_has_round_ticks_dates_and_the_zone() {
        let b = Buckets::of(
            Window::Hour,
            at("2026-12-01T10:07:13"),
            chrono_tz::Europe::Paris,
        );
        let svg = time_series(
            &b,
            &[Series::new("accepted", "c-created", vec![1; 12])],
            WIDE,
        );
        let texts = texts(&svg);
        // Paris is UTC+1 in December: the window is 10:10 – 11:10 local.
        for tick in ["10:20", "10:30", "10:40", "10:50", "11:00"] {
            assert!(texts.contains(&tick.to_owned()), "{tick} in {texts:?}");
        }
        assert!(
            texts.contains(&"1 Dec 2026 10:10 – 11:10 CET · 5m buckets".to_owned()),
            "{texts:?}"
        );
        let tooltips: Vec<&str> = svg
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Rect {
                    class,
                    title: Some(t),
                    ..
                } if class == "hover" => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(tooltips.len(), 12);
        assert_eq!(tooltips[0], "1 Dec 10:10 – 10:15 CET\naccepted: 1");
        assert!(tooltips[11].contains("(so far)"), "{}", tooltips[11]);
    }

    #[test]
    fn a_day_window_names_the_date_at_midnight() {
        let b = Buckets::of(Window::Day, at("2026-12-01T10:07:13"), chrono_tz::UTC);
        let svg = time_series(
            &b,
            &[Series::new("accepted", "c-created", vec![0; 24])],
            WIDE,
        );
        assert!(
            texts(&svg).contains(&"1 Dec".to_owned()),
            "{:?}",
            texts(&svg)
        );
    }

    #[test]
    fn every_text_fits_inside_the_chart_tails_and_all_at_either_width() {
        let b = Buckets::of(
            Window::Day,
            at("2026-12-01T10:07:13"),
            chrono_tz::Asia::Tokyo,
        );
        for width in [WIDE, NARROW] {
            let svg = time_series(
                &b,
                &[
                    Series::new("redeliveries", "c-redelivery", vec![3; 24]),
                    Series::new("duplicates suppressed", "c-suppressed", vec![1000; 24]),
                ],
                width,
            );
            assert!(texts(&svg)
                .iter()
                .any(|t| t.ends_with(" JST · 1h buckets") || t.ends_with("1 Dec 20:00 JST")));
            for shape in &svg.shapes {
                let Shape::Text {
                    x, y, text, anchor, ..
                } = shape
                else {
                    continue;
                };
                // A descender (g, p, y) reaches about a quarter of the font below the baseline.
                assert!(
                    y + FONT * 0.25 <= svg.height,
                    "{text:?} at y {y} in {}",
                    svg.height
                );
                assert!(y - FONT * 0.8 >= 0.0, "{text:?} at y {y}");
                let w = text.chars().count() as f64 * FONT * 0.56;
                let (left, right) = match anchor {
                    Anchor::Start => (*x, x + w),
                    Anchor::Middle => (x - w / 2.0, x + w / 2.0),
                    Anchor::End => (x - w, *x),
                };
                assert!(
                    left >= 0.0 && right <= svg.width,
                    "{text:?} from {left} to {right} in {width}"
                );
            }
        }
    }
}
