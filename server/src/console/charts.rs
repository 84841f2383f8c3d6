//! Server-rendered SVG charts: the job swimlane and the overview's bars and histograms.
//!
//! Hand-written SVG rather than plotters (a change from architecture.md, for this reason):
//! the swimlane needs lanes of labelled intervals and markers that plotters has no primitive
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
const LANE_H: f64 = 30.0;
const TOP: f64 = 22.0;

/// The swimlane chart of one job from `start` to `end` (µs).
pub fn swimlane(start: i64, end: i64, marks: &[Mark]) -> Svg {
    let end = end.max(start + 1);
    let span = (end - start) as f64;
    let x = |t: i64| LEFT + ((t - start) as f64 / span).clamp(0.0, 1.0) * (WIDTH - LEFT - 10.0);
    let height = TOP + LANE_H * LANES.len() as f64 + 24.0;
    let mut shapes = Vec::new();
    for (i, lane) in LANES.iter().enumerate() {
        let y = TOP + LANE_H * i as f64;
        shapes.push(Shape::Rect {
            x: 0.0,
            y,
            width: WIDTH,
            height: LANE_H,
            rx: 0.0,
            class: format!("lane{}", i % 2),
            title: None,
        });
        shapes.push(text(
            6.0,
            y + LANE_H * 0.62,
            Anchor::Start,
            "lane-label",
            *lane,
        ));
    }
    // Time axis: five ticks, as offsets from the job's creation.
    let axis_y = TOP + LANE_H * LANES.len() as f64;
    for i in 0..=4 {
        let t = start + (span * i as f64 / 4.0) as i64;
        shapes.push(Shape::Line {
            x1: x(t),
            y1: TOP,
            x2: x(t),
            y2: axis_y,
            class: "tick".into(),
        });
        // The outer labels stay inside the chart.
        let anchor = match i {
            0 => Anchor::Start,
            4 => Anchor::End,
            _ => Anchor::Middle,
        };
        shapes.push(text(
            x(t),
            axis_y + 16.0,
            anchor,
            "axis",
            format!("+{}", human_duration(t - start)),
        ));
    }
    for mark in marks {
        match mark {
            Mark::Span {
                lane,
                from,
                to,
                class,
                label,
                title,
            } => {
                let y = TOP + LANE_H * *lane as f64 + 5.0;
                let (x0, x1) = (x(*from), x(*to).max(x(*from) + 2.0));
                let mut inner = vec![Shape::Rect {
                    x: x0,
                    y,
                    width: x1 - x0,
                    height: LANE_H - 10.0,
                    rx: 3.0,
                    class: String::new(),
                    title: None,
                }];
                if x1 - x0 > 40.0 {
                    inner.push(text(
                        x0 + 4.0,
                        y + LANE_H * 0.45,
                        Anchor::Start,
                        "span-label",
                        label.clone(),
                    ));
                }
                shapes.push(Shape::Group {
                    class: class.clone(),
                    title: Some(title.clone()),
                    shapes: inner,
                });
            }
            Mark::Point {
                lane,
                at,
                class,
                symbol,
                title,
            } => shapes.push(Shape::Text {
                x: x(*at),
                y: TOP + LANE_H * *lane as f64 + LANE_H * 0.68,
                anchor: Anchor::Middle,
                class: format!("point {class}"),
                text: symbol.to_string(),
                title: Some(title.clone()),
            }),
            Mark::Density {
                lane,
                from,
                to,
                count,
                class,
                title,
            } => {
                let (x0, x1) = (x(*from), x(*to).max(x(*from) + 1.5));
                shapes.push(Shape::Rect {
                    x: x0,
                    y: TOP + LANE_H * *lane as f64 + 8.0,
                    width: x1 - x0,
                    height: LANE_H - 16.0,
                    rx: 0.0,
                    class: format!("density {class}"),
                    title: Some(format!("{title} ({count})")),
                });
            }
        }
    }
    Svg {
        width: WIDTH,
        height,
        label: "Swimlane chart of the job's timeline".into(),
        class: "swimlane-svg".into(),
        shapes,
    }
}

/// Stacked bars over time: `series` are (label, css class, counts per bucket).
pub fn bars(buckets: usize, bucket_label: &str, series: &[(String, String, Vec<i64>)]) -> Svg {
    let (w, h, left, bottom) = (480.0, 160.0, 36.0, 20.0);
    let totals: Vec<i64> = (0..buckets)
        .map(|b| {
            series
                .iter()
                .map(|(_, _, c)| c.get(b).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1);
    let bw = (w - left) / buckets.max(1) as f64;
    let mut shapes = vec![
        text(2.0, 12.0, Anchor::Start, "axis", max.to_string()),
        text(2.0, h - bottom, Anchor::Start, "axis", "0"),
        Shape::Line {
            x1: left,
            y1: h - bottom,
            x2: w,
            y2: h - bottom,
            class: "tick".into(),
        },
    ];
    for b in 0..buckets {
        let mut y = h - bottom;
        for (label, class, counts) in series {
            let n = counts.get(b).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let bh = (h - bottom - 6.0) * n as f64 / max as f64;
            y -= bh;
            shapes.push(Shape::Rect {
                x: left + bw * b as f64 + 0.5,
                y,
                width: (bw - 1.0).max(0.5),
                height: bh,
                rx: 0.0,
                class: class.clone(),
                title: Some(format!("{label}: {n} ({bucket_label} {})", b + 1)),
            });
        }
    }
    shapes.push(text(left, h - 4.0, Anchor::Start, "axis", "older"));
    shapes.push(text(w, h - 4.0, Anchor::End, "axis", "now"));
    Svg {
        width: w,
        height: h,
        label: series
            .iter()
            .map(|s| s.0.clone())
            .collect::<Vec<_>>()
            .join(", "),
        class: "bars-svg".into(),
        shapes,
    }
}

/// A histogram of labelled bins.
pub fn histogram(bins: &[(String, i64)], class: &str) -> Svg {
    let (w, h, bottom) = (480.0, 160.0, 34.0);
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
        assert_eq!(
            lane_of_point,
            Some(TOP + LANE_H * 0.68),
            "the delivery is on lane 0"
        );
    }

    #[test]
    fn bars_scale_to_the_tallest_stack() {
        let svg = bars(
            2,
            "bucket",
            &[
                ("created".into(), "c1".into(), vec![2, 4]),
                ("done".into(), "c2".into(), vec![0, 4]),
            ],
        );
        assert_eq!(
            svg.texts()[0],
            "8",
            "the axis tops out at the tallest stack"
        );
        assert!(svg.shapes.iter().any(|s| matches!(
            s,
            Shape::Rect { title: Some(t), .. } if t.starts_with("created: 4")
        )));
    }
}
