//! Server-rendered SVG charts drawn by hand: the job swimlane and the overview's histograms
//! (the overview's time series are laid out by plotters, in [`super::plot`]).
//!
//! The swimlane needs lanes of labelled intervals and markers that plotters has no primitive
//! for, and plain SVG keeps exact text labels, `<title>` tooltips for every mark and no font
//! metrics at all. Colours come from CSS classes, so light and dark themes both apply, and
//! every coloured mark also has a text label or title. The charts are data
//! ([`fenceline_app::svg::Svg`]); the console draws them, escaping every text by construction.

use fenceline_app::svg::{Anchor, Shape, Svg};

use crate::time::human_duration;

fn text(x: f64, y: f64, anchor: Anchor, class: &str, text: impl Into<String>) -> Shape {
    Shape::Text {
        x,
        y,
        anchor,
        class: class.into(),
        text: text.into(),
        title: None,
    }
}

/// A mark on the swimlane chart.
#[derive(Debug, Clone, PartialEq)]
pub enum Mark {
    /// An interval on a lane, `[from, to]` in microseconds.
    Span {
        lane: usize,
        from: i64,
        to: i64,
        class: String,
        label: String,
        title: String,
    },
    /// A period of waiting on a lane (a job `unknown` until a decision, `retry_authorized`
    /// until a worker claims it), drawn as a span; it does not keep the axis to scale, so a
    /// long wait is drawn across a compressed break instead of squashing the work before it.
    Wait {
        lane: usize,
        from: i64,
        to: i64,
        class: String,
        label: String,
        title: String,
    },
    /// A point event.
    Point {
        lane: usize,
        at: i64,
        class: String,
        symbol: char,
        title: String,
    },
    /// A count of repeated events in a time bucket (renewals).
    Density {
        lane: usize,
        from: i64,
        to: i64,
        count: i64,
        class: String,
        title: String,
    },
}

pub const LANES: [&str; 6] = [
    "deliveries",
    "visibility",
    "lease / epoch",
    "provider attempts",
    "ledger",
    "queue",
];

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 130.0;
const RIGHT: f64 = 14.0;
const LANE_H: f64 = 30.0;
const TOP: f64 = 22.0;
/// The width of a compressed idle gap.
const BREAK: f64 = 56.0;
/// The width of a compressed gap that a wait spans, room for the wait's label.
const WAIT_BREAK: f64 = 200.0;
/// Breaks take at most this share of the axis; more of them are drawn narrower.
const BREAKS_AT_MOST: f64 = 0.6;
/// Rows of same-instant marks in one lane sit this far apart.
const ROW_H: f64 = 14.0;
/// Marks closer than this (px) in one lane go on separate rows.
const MARK_W: f64 = 13.0;
/// A lane stacks at most this many rows of marks. Marks that would need more are counted
/// instead, as "+N" on a row below, so a storm of deliveries at one instant cannot stretch
/// the chart down the page.
const MAX_ROWS: usize = 6;
/// Counted marks closer than this (px) in one lane share one count.
const MORE_W: f64 = 30.0;

/// A piece of the swimlane's time axis: drawn to scale, or an idle gap drawn as a fixed break.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub from: i64,
    pub to: i64,
    pub gap: bool,
    /// A gap that a wait spans, drawn wider so the wait's label fits.
    pub waiting: bool,
}

/// The time axis of a swimlane: where each instant of `[start, end]` is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub segments: Vec<Segment>,
    /// The time drawn to scale (the segments that are not breaks).
    linear: i64,
    scale: f64,
    /// How much of its width each break gets (1 unless there are many).
    breaks_scale: f64,
}

impl Axis {
    /// An axis over `[start, end]` that compresses idle gaps: a stretch with no mark in it
    /// that is longer than 1 s and than a fifth of the rest of the chart's time becomes a
    /// fixed-width break, so a late event cannot squash the work into a sliver.
    pub fn new(start: i64, end: i64, busy: &[(i64, i64)]) -> Axis {
        let end = end.max(start + 1);
        let mut covered: Vec<(i64, i64)> = busy
            .iter()
            .map(|(a, b)| ((*a).clamp(start, end), (*b).clamp(start, end)))
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        covered.push((start, start));
        covered.push((end, end));
        covered.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for (a, b) in covered {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut gaps: Vec<(i64, i64)> = merged.windows(2).map(|w| (w[0].1, w[1].0)).collect();
        gaps.sort_by_key(|(a, b)| std::cmp::Reverse(b - a));
        let mut drawn = end - start;
        let mut compressed = Vec::new();
        for (a, b) in gaps {
            let len = b - a;
            if len > 1_000_000 && len * 5 > drawn - len {
                compressed.push((a, b));
                drawn -= len;
            } else {
                break;
            }
        }
        compressed.sort_unstable();
        let mut segments = Vec::new();
        let mut at = start;
        for (a, b) in compressed {
            if a > at {
                segments.push(Segment {
                    from: at,
                    to: a,
                    gap: false,
                    waiting: false,
                });
            }
            segments.push(Segment {
                from: a,
                to: b,
                gap: true,
                waiting: false,
            });
            at = b;
        }
        if end > at || segments.is_empty() {
            segments.push(Segment {
                from: at,
                to: end,
                gap: false,
                waiting: false,
            });
        }
        let linear: i64 = segments
            .iter()
            .filter(|s| !s.gap)
            .map(|s| s.to - s.from)
            .sum();
        let mut axis = Axis {
            segments,
            linear,
            scale: 0.0,
            breaks_scale: 1.0,
        };
        axis.rescale();
        axis
    }

    /// Draws wider the breaks that lie within one of `waits`, so a wait across a long idle
    /// stretch has room for its label.
    pub fn widen_breaks_within(&mut self, waits: &[(i64, i64)]) {
        for s in self.segments.iter_mut().filter(|s| s.gap) {
            s.waiting = waits.iter().any(|(a, b)| *a <= s.from && s.to <= *b);
        }
        self.rescale();
    }

    fn rescale(&mut self) {
        self.breaks_scale = 1.0;
        let breaks: f64 = self
            .segments
            .iter()
            .filter(|s| s.gap)
            .map(|s| self.width_of(s))
            .sum();
        let most = (WIDTH - LEFT - RIGHT) * BREAKS_AT_MOST;
        if breaks > most {
            self.breaks_scale = most / breaks;
        }
        let room = WIDTH - LEFT - RIGHT - breaks.min(most);
        self.scale = room / self.linear.max(1) as f64;
    }

    /// Where `t` is drawn (clamped to the axis).
    pub fn x(&self, t: i64) -> f64 {
        let mut x = LEFT;
        for s in &self.segments {
            let width = self.width_of(s);
            if t <= s.to {
                let into = (t.max(s.from) - s.from) as f64 / (s.to - s.from).max(1) as f64;
                return x + into * width;
            }
            x += width;
        }
        x
    }

    fn width_of(&self, s: &Segment) -> f64 {
        if s.gap && s.waiting {
            WAIT_BREAK * self.breaks_scale
        } else if s.gap {
            BREAK * self.breaks_scale
        } else {
            (s.to - s.from) as f64 * self.scale
        }
    }

    /// Tick offsets from `origin` on a round step (100 ms, 1 s, 15 s, 5 min…), only where
    /// the axis is to scale and never crowding each other.
    pub fn ticks(&self, origin: i64) -> Vec<i64> {
        let step = round_step(self.linear / 6);
        let mut ticks: Vec<i64> = Vec::new();
        let mut last_x = f64::NEG_INFINITY;
        for s in self.segments.iter().filter(|s| !s.gap) {
            let first = (s.from - origin).div_euclid(step) * step + origin;
            let mut t = if first < s.from { first + step } else { first };
            while t <= s.to {
                let x = self.x(t);
                if x - last_x >= 60.0 {
                    ticks.push(t);
                    last_x = x;
                }
                t += step;
            }
        }
        ticks
    }
}

/// The smallest round step (µs) at or above `us`: 1, 2, 5 × 10ⁿ ms, then 10 s, 15 s, 30 s,
/// 1, 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, days.
pub fn round_step(us: i64) -> i64 {
    const MS: i64 = 1_000;
    const S: i64 = 1_000_000;
    const M: i64 = 60 * S;
    const H: i64 = 60 * M;
    let steps = [
        MS,
        2 * MS,
        5 * MS,
        10 * MS,
        20 * MS,
        50 * MS,
        100 * MS,
        200 * MS,
        500 * MS,
        S,
        2 * S,
        5 * S,
        10 * S,
        15 * S,
        30 * S,
        M,
        2 * M,
        5 * M,
        10 * M,
        15 * M,
        30 * M,
        H,
        2 * H,
        3 * H,
        6 * H,
        12 * H,
    ];
    steps
        .into_iter()
        .find(|s| *s >= us)
        .unwrap_or_else(|| (us / (24 * H) + 1) * 24 * H)
}

/// An offset as a tick label: `+0`, `+250ms`, `+1.5s`, `+2m`, `+1m 30s`, `+3h`.
pub fn offset_label(us: i64) -> String {
    if us == 0 {
        "+0".into()
    } else {
        format!("+{}", round_span(us))
    }
}

/// A span that falls on a round value, without zeros: `250ms`, `1.5s`, `2m`, `1m 30s`, `6h`.
pub fn round_span(us: i64) -> String {
    let ms = us / 1_000;
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let s = ms as f64 / 1000.0;
        if ms % 1000 == 0 {
            format!("{s:.0}s")
        } else {
            format!("{s}s")
        }
    } else if ms < 3_600_000 {
        match (ms / 60_000, ms % 60_000 / 1000) {
            (m, 0) => format!("{m}m"),
            (m, s) => format!("{m}m {s}s"),
        }
    } else {
        match (ms / 3_600_000, ms % 3_600_000 / 60_000) {
            (h, 0) => format!("{h}h"),
            (h, m) => format!("{h}h {m}m"),
        }
    }
}

/// The row of each point mark in its lane, so marks at (nearly) the same instant stack
/// instead of drawing over each other (`None`: no room within [`MAX_ROWS`], counted instead);
/// returns the rows and the rows each lane needs, the row of counts included.
fn stack_rows(points: &[(usize, f64)]) -> (Vec<Option<usize>>, Vec<usize>) {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|a, b| points[*a].1.total_cmp(&points[*b].1));
    let mut rows = vec![None; points.len()];
    // Per lane: the x of the last mark on each row, and whether any mark was counted.
    let mut ends: Vec<Vec<f64>> = vec![Vec::new(); LANES.len()];
    let mut counted = vec![false; LANES.len()];
    for i in order {
        let (lane, x) = points[i];
        let lane = lane.min(LANES.len() - 1);
        let lane_ends = &mut ends[lane];
        match lane_ends.iter().position(|end| x - end >= MARK_W) {
            Some(row) => {
                lane_ends[row] = x;
                rows[i] = Some(row);
            }
            None if lane_ends.len() < MAX_ROWS => {
                lane_ends.push(x);
                rows[i] = Some(lane_ends.len() - 1);
            }
            None => counted[lane] = true,
        }
    }
    let needed = ends
        .iter()
        .zip(&counted)
        .map(|(e, c)| e.len().max(1) + usize::from(*c))
        .collect();
    (rows, needed)
}

/// Where a point mark on row `row` of `lane` sits (its text's baseline).
fn point_y(lane_top: &[f64], lane: usize, row: usize) -> f64 {
    lane_top[lane] + 20.0 + ROW_H * row as f64
}

/// The marks with no row of their own, as counts: one "+N" for each cluster of them in a
/// lane, its tooltip naming the first few.
fn counted_marks(mut more: Vec<(usize, f64, &str)>, lane_top: &[f64]) -> Vec<Shape> {
    more.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut shapes = Vec::new();
    let mut i = 0;
    while i < more.len() {
        let (lane, x0, _) = more[i];
        let n = more[i..]
            .iter()
            .take_while(|m| m.0 == lane && m.1 - x0 < MORE_W)
            .count();
        let named: Vec<&str> = more[i..i + n].iter().take(3).map(|m| m.2).collect();
        let rest = if n > named.len() { "; …" } else { "" };
        shapes.push(Shape::Text {
            x: x0,
            y: point_y(lane_top, lane, MAX_ROWS),
            anchor: Anchor::Middle,
            class: "point more".into(),
            text: format!("+{n}"),
            title: Some(format!("{n} more here: {}{rest}", named.join("; "))),
        });
        i += n;
    }
    shapes
}

/// The swimlane chart of one job from `start` to `end` (µs), offsets counted from `origin`
/// (the job's creation).
pub fn swimlane(origin: i64, start: i64, end: i64, marks: &[Mark]) -> Svg {
    let end = end.max(start + 1);
    let busy: Vec<(i64, i64)> = marks
        .iter()
        .map(|m| match m {
            Mark::Span { from, to, .. } | Mark::Density { from, to, .. } => (*from, *to),
            Mark::Point { at, .. } | Mark::Wait { from: at, .. } => (*at, *at),
        })
        .filter(|(a, b)| *b >= start && *a <= end)
        .collect();
    let mut axis = Axis::new(start, end, &busy);
    let waits: Vec<(i64, i64)> = marks
        .iter()
        .filter_map(|m| match m {
            Mark::Wait { from, to, .. } => Some((*from, *to)),
            _ => None,
        })
        .collect();
    axis.widen_breaks_within(&waits);
    let x = |t: i64| axis.x(t);
    // Rows of point marks per lane; a lane grows to hold its rows.
    let visible: Vec<&Mark> = marks
        .iter()
        .filter(|m| match m {
            Mark::Point { at, .. } => *at >= start && *at <= end,
            Mark::Span { from, to, .. }
            | Mark::Wait { from, to, .. }
            | Mark::Density { from, to, .. } => *to >= start && *from <= end,
        })
        .collect();
    let points: Vec<(usize, f64)> = visible
        .iter()
        .filter_map(|m| match m {
            Mark::Point { lane, at, .. } => Some((*lane, x(*at))),
            _ => None,
        })
        .collect();
    let (rows, lane_rows) = stack_rows(&points);
    let lane_h: Vec<f64> = lane_rows
        .iter()
        .map(|r| LANE_H.max(8.0 + ROW_H * *r as f64 + 6.0))
        .collect();
    let lane_top: Vec<f64> = lane_h
        .iter()
        .scan(TOP, |y, h| {
            let top = *y;
            *y += h;
            Some(top)
        })
        .collect();
    let axis_y = TOP + lane_h.iter().sum::<f64>();
    let height = axis_y + 24.0;
    let mut shapes = Vec::new();
    for (i, lane) in LANES.iter().enumerate() {
        shapes.push(Shape::Rect {
            x: 0.0,
            y: lane_top[i],
            width: WIDTH,
            height: lane_h[i],
            rx: 0.0,
            class: format!("lane{}", i % 2),
            title: None,
        });
        shapes.push(text(
            6.0,
            lane_top[i] + 19.0,
            Anchor::Start,
            "lane-label",
            *lane,
        ));
    }
    // Idle gaps: a visible break with how long nothing happened.
    for s in axis.segments.iter().filter(|s| s.gap) {
        let (x0, x1) = (x(s.from), x(s.to));
        shapes.push(Shape::Rect {
            x: x0,
            y: TOP,
            width: x1 - x0,
            height: axis_y - TOP,
            rx: 0.0,
            class: "gap".into(),
            title: Some(format!(
                "nothing happened for {} (compressed)",
                human_duration(s.to - s.from)
            )),
        });
        for edge in [x0 + 3.0, x1 - 3.0] {
            shapes.push(Shape::Line {
                x1: edge,
                y1: TOP,
                x2: edge,
                y2: axis_y,
                class: "gap-edge".into(),
            });
        }
        shapes.push(text(
            (x0 + x1) / 2.0,
            axis_y + 16.0,
            Anchor::Middle,
            "axis gap-label",
            format!("{} idle", human_duration(s.to - s.from)),
        ));
    }
    // Round ticks where the axis is to scale, as offsets from the job's creation; the
    // outer labels stay inside the chart and none sits on a break's label.
    let breaks: Vec<(f64, f64)> = axis
        .segments
        .iter()
        .filter(|s| s.gap)
        .map(|s| (x(s.from), x(s.to)))
        .collect();
    for t in axis.ticks(origin) {
        let tx = x(t);
        shapes.push(Shape::Line {
            x1: tx,
            y1: TOP,
            x2: tx,
            y2: axis_y,
            class: "tick".into(),
        });
        if breaks.iter().any(|(a, b)| tx > a - 34.0 && tx < b + 34.0) {
            continue;
        }
        let anchor = if tx - LEFT < 20.0 {
            Anchor::Start
        } else if WIDTH - RIGHT - tx < 24.0 {
            Anchor::End
        } else {
            Anchor::Middle
        };
        shapes.push(text(
            tx,
            axis_y + 16.0,
            anchor,
            "axis",
            offset_label(t - origin),
        ));
    }
    let mut labels = Vec::new();
    let mut point_no = 0;
    let mut more = Vec::new();
    for mark in visible {
        match mark {
            Mark::Span {
                lane,
                from,
                to,
                class,
                label,
                title,
            }
            | Mark::Wait {
                lane,
                from,
                to,
                class,
                label,
                title,
            } => {
                let y = lane_top[*lane] + 4.0;
                let h = LANE_H - 13.0;
                let (x0, x1) = (x(*from), x(*to).max(x(*from) + 2.0));
                shapes.push(Shape::Group {
                    class: class.clone(),
                    title: Some(title.clone()),
                    shapes: vec![Shape::Rect {
                        x: x0,
                        y,
                        width: x1 - x0,
                        height: h,
                        rx: 3.0,
                        class: String::new(),
                        title: None,
                    }],
                });
                // Drawn after every mark, so nothing covers it; only where it fits.
                if x1 - x0 > 7.0 * label.chars().count() as f64 + 8.0 {
                    labels.push(text(
                        x0 + 4.0,
                        y + h * 0.72,
                        Anchor::Start,
                        "span-label",
                        label.clone(),
                    ));
                }
            }
            Mark::Point {
                lane,
                at,
                class,
                symbol,
                title,
            } => {
                let row = rows[point_no];
                point_no += 1;
                let Some(row) = row else {
                    more.push((*lane, x(*at), title.as_str()));
                    continue;
                };
                shapes.push(Shape::Text {
                    x: x(*at),
                    y: point_y(&lane_top, *lane, row),
                    anchor: Anchor::Middle,
                    class: format!("point {class}"),
                    text: symbol.to_string(),
                    title: Some(title.clone()),
                });
            }
            Mark::Density {
                lane,
                from,
                to,
                count,
                class,
                title,
            } => {
                // A strip along the lane's foot, under any bar and its label.
                let (x0, x1) = (x(*from), x(*to).max(x(*from) + 1.5));
                shapes.push(Shape::Rect {
                    x: x0,
                    y: lane_top[*lane] + lane_h[*lane] - 8.0,
                    width: x1 - x0,
                    height: 6.0,
                    rx: 0.0,
                    class: format!("density {class}"),
                    title: Some(format!("{title} ({count})")),
                });
            }
        }
    }
    shapes.extend(counted_marks(more, &lane_top));
    shapes.extend(labels);
    Svg {
        width: WIDTH,
        height,
        label: "Swimlane chart of the job's timeline".into(),
        class: "swimlane-svg".into(),
        shapes,
    }
}

/// A histogram of labelled bins, `width` units wide.
pub fn histogram(bins: &[(String, i64)], class: &str, width: u32) -> Svg {
    let (w, h, bottom) = (f64::from(width), 160.0, 34.0);
    let max = bins.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bw = w / bins.len().max(1) as f64;
    let mut shapes = Vec::new();
    for (i, (label, n)) in bins.iter().enumerate() {
        let bh = (h - bottom - 14.0) * *n as f64 / max as f64;
        let x0 = bw * i as f64;
        shapes.push(Shape::Rect {
            x: x0 + 2.0,
            y: h - bottom - bh,
            width: (bw - 4.0).max(1.0),
            height: bh,
            rx: 0.0,
            class: class.into(),
            title: Some(format!("{label}: {n}")),
        });
        shapes.push(text(
            x0 + bw / 2.0,
            (h - bottom - bh - 3.0).max(10.0),
            Anchor::Middle,
            "axis",
            n.to_string(),
        ));
        shapes.push(text(
            x0 + bw / 2.0,
            h - bottom + 14.0,
            Anchor::Middle,
            "axis",
            label.clone(),
        ));
    }
    Svg {
        width: w,
        height: h,
        label: "histogram".into(),
        class: "hist-svg".into(),
        shapes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_would_write_them() {
        assert_eq!(human_duration(250_000), "250ms");
        assert_eq!(human_duration(3_400_000), "3.4s");
        assert_eq!(human_duration(125_000_000), "2m 5s");
        assert_eq!(human_duration(3_720_000_000), "1h 2m");
    }

    #[test]
    fn the_swimlane_escapes_labels_and_places_marks_in_their_lane() {
        let svg = swimlane(
            0,
            0,
            10_000_000,
            &[
                Mark::Span {
                    lane: 3,
                    from: 1_000_000,
                    to: 9_000_000,
                    class: "attempt succeeded".into(),
                    label: "attempt 1 <ok>".into(),
                    title: "attempt 1".into(),
                },
                Mark::Point {
                    lane: 0,
                    at: 500_000,
                    class: "delivery".into(),
                    symbol: '▼',
                    title: "receive 1".into(),
                },
            ],
        );
        let texts = svg.texts();
        // Kept as text: the console escapes it when it draws the chart.
        assert!(texts.contains(&"attempt 1 <ok>"), "{texts:?}");
        for lane in LANES {
            assert!(texts.contains(&lane), "{lane}");
        }
        let lane_of_point = svg.shapes.iter().find_map(|s| match s {
            Shape::Text { text, y, .. } if text == "▼" => Some(*y),
            _ => None,
        });
        assert_eq!(lane_of_point, Some(TOP + 20.0), "the delivery is on lane 0");
    }

    fn point(lane: usize, at: i64, symbol: char) -> Mark {
        Mark::Point {
            lane,
            at,
            class: "p".into(),
            symbol,
            title: symbol.to_string(),
        }
    }

    const S: i64 = 1_000_000;

    #[test]
    fn a_late_event_does_not_squash_the_work_it_follows() {
        // Half a second of work, then an idempotent replay three minutes later.
        let marks = [
            point(0, 0, '▼'),
            point(4, 100_000, '◆'),
            point(4, 500_000, '★'),
            point(0, 180 * S, '✓'),
        ];
        let axis = Axis::new(
            0,
            180 * S,
            &[
                (0, 0),
                (100_000, 100_000),
                (500_000, 500_000),
                (180 * S, 180 * S),
            ],
        );
        let gaps: Vec<&Segment> = axis.segments.iter().filter(|s| s.gap).collect();
        assert_eq!(gaps.len(), 1, "{:?}", axis.segments);
        assert_eq!((gaps[0].from, gaps[0].to), (500_000, 180 * S));
        // The half second of work takes most of the width; the gap is a fixed break.
        let work = axis.x(500_000) - axis.x(0);
        assert!(work > 700.0, "the work is drawn {work} px wide");
        assert!((axis.x(180 * S) - axis.x(500_000) - BREAK).abs() < 0.01);
        let svg = swimlane(0, 0, 180 * S, &marks);
        let texts = svg.texts();
        assert!(texts.contains(&"2m 59s idle"), "{texts:?}");
        // Ticks fall on round offsets.
        for tick in ["+0", "+100ms", "+200ms", "+300ms", "+400ms"] {
            assert!(texts.contains(&tick), "{tick} in {texts:?}");
        }
    }

    #[test]
    fn a_long_wait_is_drawn_across_a_break_without_squashing_the_work_before_it() {
        // Half a second of work, then an hour `unknown` waiting for a decision.
        let mut marks = vec![point(4, 0, '◆'), point(2, 500_000, '◆')];
        marks.push(Mark::Wait {
            lane: 2,
            from: 500_000,
            to: 3600 * S,
            class: "waiting unknown".into(),
            label: "epoch 2 · unknown".into(),
            title: "waiting".into(),
        });
        let svg = swimlane(0, 0, 3600 * S, &marks);
        let texts = svg.texts();
        assert!(texts.contains(&"59m 59s idle"), "{texts:?}");
        assert!(
            texts.contains(&"+400ms"),
            "the work keeps its scale: {texts:?}"
        );
        // The break it spans is drawn wide enough for its label.
        assert!(texts.contains(&"epoch 2 · unknown"), "{texts:?}");
        // A span over the same hour would keep it to scale instead.
        marks.pop();
        marks.push(Mark::Span {
            lane: 2,
            from: 500_000,
            to: 3600 * S,
            class: "lease".into(),
            label: String::new(),
            title: String::new(),
        });
        let texts = swimlane(0, 0, 3600 * S, &marks).texts().join(" ");
        assert!(!texts.contains("idle"), "{texts}");
    }

    #[test]
    fn many_breaks_share_at_most_part_of_the_axis_and_it_ends_inside_the_chart() {
        // Ten bursts of work, each followed by a wait shorter than the one before (each long
        // enough to be compressed).
        let mut busy = Vec::new();
        let mut waits = Vec::new();
        let (mut t, mut wait) = (0, 1000 * S);
        for _ in 0..10 {
            busy.push((t, t + 100_000));
            waits.push((t + 100_000, t + 100_000 + wait));
            t += 100_000 + wait;
            wait = wait * 7 / 10;
        }
        let end = t;
        let mut axis = Axis::new(0, end, &busy);
        assert_eq!(axis.segments.iter().filter(|s| s.gap).count(), 10);
        axis.widen_breaks_within(&waits);
        assert!(
            (axis.x(end) - (WIDTH - RIGHT)).abs() < 0.01,
            "{}",
            axis.x(end)
        );
        let work: f64 = busy.iter().map(|(a, b)| axis.x(*b) - axis.x(*a)).sum();
        assert!(
            work >= (WIDTH - LEFT - RIGHT) * 0.39,
            "the work keeps {work} px"
        );
    }

    #[test]
    fn evenly_spread_events_are_not_compressed() {
        let busy: Vec<(i64, i64)> = (0..10).map(|i| (i * 10 * S, i * 10 * S)).collect();
        let axis = Axis::new(0, 90 * S, &busy);
        assert!(axis.segments.iter().all(|s| !s.gap), "{:?}", axis.segments);
        // A call running through a quiet minute is activity, not a gap.
        let axis = Axis::new(0, 70 * S, &[(0, 0), (S, 65 * S), (70 * S, 70 * S)]);
        assert!(axis.segments.iter().all(|s| !s.gap), "{:?}", axis.segments);
    }

    /// The height of each lane, top to bottom.
    fn lane_heights(svg: &Svg) -> Vec<f64> {
        svg.shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Rect { class, height, .. } if class.starts_with("lane") => Some(*height),
                _ => None,
            })
            .collect()
    }

    /// A storm of marks at one instant stacks only so far: the rest are counted on one row
    /// below, and the lane stays a few rows tall.
    #[test]
    fn a_storm_of_marks_at_one_instant_is_counted_beyond_a_few_rows() {
        let mut marks: Vec<Mark> = (0..100).map(|_| point(0, 1_000, '⊘')).collect();
        marks.push(point(0, 9 * S, '▼'));
        let svg = swimlane(0, 0, 10 * S, &marks);
        let texts: Vec<(&str, &str)> = svg
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Text { text, class, .. } if class.starts_with("point") => {
                    Some((class.as_str(), text.as_str()))
                }
                _ => None,
            })
            .collect();
        let drawn = texts.iter().filter(|t| t.0 != "point more").count();
        assert_eq!(drawn, MAX_ROWS + 1, "{texts:?}");
        let counts: Vec<&str> = texts
            .iter()
            .filter(|t| t.0 == "point more")
            .map(|t| t.1)
            .collect();
        assert_eq!(counts, [format!("+{}", 100 - MAX_ROWS)]);
        let lane = lane_heights(&svg)[0];
        assert!(lane <= 8.0 + ROW_H * (MAX_ROWS + 1) as f64 + 6.0, "{lane}");
    }

    #[test]
    fn marks_at_one_instant_stack_instead_of_colliding() {
        let marks = [
            point(4, 1_000, '◆'),
            point(4, 1_000, '★'),
            point(4, 1_200, '⚑'),
            point(0, 1_000, '▼'),
            point(4, 9 * S, '✗'),
        ];
        let svg = swimlane(0, 0, 10 * S, &marks);
        let placed: Vec<(String, f64, f64)> = svg
            .shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Text {
                    text, x, y, class, ..
                } if class.starts_with("point") => Some((text.clone(), *x, *y)),
                _ => None,
            })
            .collect();
        assert_eq!(placed.len(), 5);
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[i + 1..] {
                let apart = (a.1 - b.1).abs() >= MARK_W || (a.2 - b.2).abs() >= ROW_H;
                assert!(apart, "{a:?} and {b:?} overlap");
            }
        }
        // The lane grew to hold three rows, and the lanes below moved down.
        let lanes = lane_heights(&svg);
        assert!(lanes[4] >= 8.0 + 3.0 * ROW_H, "{lanes:?}");
        assert_eq!(lanes[0], LANE_H);
    }

    #[test]
    fn span_labels_sit_above_renewal_marks() {
        let marks = [
            Mark::Span {
                lane: 2,
                from: 0,
                to: 9 * S,
                class: "lease".into(),
                label: "epoch 1 · worker-a".into(),
                title: "lease".into(),
            },
            Mark::Density {
                lane: 2,
                from: S,
                to: 2 * S,
                count: 3,
                class: "renew-ok".into(),
                title: "lease renewed".into(),
            },
        ];
        let svg = swimlane(0, 0, 10 * S, &marks);
        let label_at = svg
            .shapes
            .iter()
            .position(|s| matches!(s, Shape::Text { text, .. } if text == "epoch 1 · worker-a"));
        let density_at = svg
            .shapes
            .iter()
            .position(|s| matches!(s, Shape::Rect { class, .. } if class.starts_with("density")));
        assert!(
            label_at > density_at,
            "the label is drawn last, over everything"
        );
        let (bar_bottom, density_top) = svg.shapes.iter().fold((0.0, 0.0), |acc, s| match s {
            Shape::Group { shapes, .. } => match &shapes[0] {
                Shape::Rect { y, height, .. } => (y + height, acc.1),
                _ => acc,
            },
            Shape::Rect { class, y, .. } if class.starts_with("density") => (acc.0, *y),
            _ => acc,
        });
        assert!(
            density_top >= bar_bottom,
            "{density_top} under {bar_bottom}"
        );
    }

    #[test]
    fn steps_and_offsets_are_round() {
        assert_eq!(round_step(70_000), 100_000);
        assert_eq!(round_step(44_100_000), 60_000_000);
        assert_eq!(round_step(88_000_000), 120_000_000);
        assert_eq!(offset_label(1_500_000), "+1.5s");
        assert_eq!(offset_label(90_000_000), "+1m 30s");
        assert_eq!(offset_label(120_000_000), "+2m");
        assert_eq!(offset_label(200_000), "+200ms");
    }
}
