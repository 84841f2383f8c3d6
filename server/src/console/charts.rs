//! Server-rendered SVG charts: the job swimlane and the overview's bars and histograms.
//!
//! Hand-written SVG rather than plotters (a change from architecture.md, for this reason):
//! the swimlane needs lanes of labelled intervals and markers that plotters has no primitive
//! for, and plain SVG keeps exact text labels, `<title>` tooltips for every mark and no font
//! metrics at all. Colours come from CSS classes, so light and dark themes both apply, and
//! every coloured mark also has a text label or title.

use std::fmt::Write;

/// Escapes text for SVG content and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
pub fn swimlane(start: i64, end: i64, marks: &[Mark]) -> String {
    let end = end.max(start + 1);
    let span = (end - start) as f64;
    let x = |t: i64| LEFT + ((t - start) as f64 / span).clamp(0.0, 1.0) * (WIDTH - LEFT - 10.0);
    let height = TOP + LANE_H * LANES.len() as f64 + 24.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="Swimlane chart of the job's timeline" class="swimlane-svg">"#
    );
    for (i, lane) in LANES.iter().enumerate() {
        let y = TOP + LANE_H * i as f64;
        let _ = write!(
            svg,
            r#"<rect class="lane{}" x="0" y="{y}" width="{WIDTH}" height="{LANE_H}"/><text class="lane-label" x="6" y="{:.1}">{}</text>"#,
            i % 2,
            y + LANE_H * 0.62,
            esc(lane)
        );
    }
    // Time axis: five ticks, as offsets from the job's creation.
    let axis_y = TOP + LANE_H * LANES.len() as f64;
    for i in 0..=4 {
        let t = start + (span * i as f64 / 4.0) as i64;
        let _ = write!(
            svg,
            r#"<line class="tick" x1="{0:.1}" x2="{0:.1}" y1="{TOP}" y2="{axis_y}"/><text class="axis" x="{0:.1}" y="{1:.1}" text-anchor="{3}">+{2}</text>"#,
            x(t),
            axis_y + 16.0,
            human_duration(t - start),
            // The outer labels stay inside the chart.
            match i {
                0 => "start",
                4 => "end",
                _ => "middle",
            }
        );
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
                let _ = write!(
                    svg,
                    r#"<g class="{}"><title>{}</title><rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" rx="3"/>"#,
                    esc(class),
                    esc(title),
                    x1 - x0,
                    LANE_H - 10.0
                );
                if x1 - x0 > 40.0 {
                    let _ = write!(
                        svg,
                        r#"<text class="span-label" x="{:.1}" y="{:.1}">{}</text>"#,
                        x0 + 4.0,
                        y + LANE_H * 0.45,
                        esc(label)
                    );
                }
                svg.push_str("</g>");
            }
            Mark::Point {
                lane,
                at,
                class,
                symbol,
                title,
            } => {
                let y = TOP + LANE_H * *lane as f64 + LANE_H * 0.68;
                let _ = write!(
                    svg,
                    r#"<text class="point {}" x="{:.1}" y="{y:.1}" text-anchor="middle"><title>{}</title>{}</text>"#,
                    esc(class),
                    x(*at),
                    esc(title),
                    esc(&symbol.to_string())
                );
            }
            Mark::Density {
                lane,
                from,
                to,
                count,
                class,
                title,
            } => {
                let y = TOP + LANE_H * *lane as f64 + 8.0;
                let (x0, x1) = (x(*from), x(*to).max(x(*from) + 1.5));
                let _ = write!(
                    svg,
                    r#"<rect class="density {}" x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}"><title>{} ({count})</title></rect>"#,
                    esc(class),
                    x1 - x0,
                    LANE_H - 16.0,
                    esc(title)
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `1h 2m`, `3.4s`, `250ms`.
pub fn human_duration(us: i64) -> String {
    let ms = us / 1000;
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.abs();
    if ms < 1000 {
        format!("{sign}{ms}ms")
    } else if ms < 60_000 {
        format!("{sign}{:.1}s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{sign}{}m {}s", ms / 60_000, ms % 60_000 / 1000)
    } else if ms < 86_400_000 {
        format!("{sign}{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    } else {
        format!(
            "{sign}{}d {}h",
            ms / 86_400_000,
            ms % 86_400_000 / 3_600_000
        )
    }
}

/// Stacked bars over time: `series` are (label, css class, counts per bucket).
pub fn bars(buckets: usize, bucket_label: &str, series: &[(String, String, Vec<i64>)]) -> String {
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
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" role="img" aria-label="{}" class="bars-svg">"#,
        esc(&series
            .iter()
            .map(|s| s.0.clone())
            .collect::<Vec<_>>()
            .join(", "))
    );
    let _ = write!(
        svg,
        r#"<text class="axis" x="2" y="12">{max}</text><text class="axis" x="2" y="{:.1}">0</text><line class="tick" x1="{left}" x2="{w}" y1="{:.1}" y2="{:.1}"/>"#,
        h - bottom,
        h - bottom,
        h - bottom
    );
    for b in 0..buckets {
        let mut y = h - bottom;
        for (label, class, counts) in series {
            let n = counts.get(b).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let bh = (h - bottom - 6.0) * n as f64 / max as f64;
            y -= bh;
            let _ = write!(
                svg,
                r#"<rect class="{}" x="{:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}"><title>{}: {n} ({} {})</title></rect>"#,
                esc(class),
                left + bw * b as f64 + 0.5,
                (bw - 1.0).max(0.5),
                esc(label),
                esc(bucket_label),
                b + 1
            );
        }
    }
    let _ = write!(
        svg,
        r#"<text class="axis" x="{left}" y="{:.1}">older</text><text class="axis" x="{w}" y="{:.1}" text-anchor="end">now</text></svg>"#,
        h - 4.0,
        h - 4.0
    );
    svg
}

/// A histogram of labelled bins.
pub fn histogram(bins: &[(String, i64)], class: &str) -> String {
    let (w, h, bottom) = (480.0, 160.0, 34.0);
    let max = bins.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let bw = w / bins.len().max(1) as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" role="img" aria-label="histogram" class="hist-svg">"#
    );
    for (i, (label, n)) in bins.iter().enumerate() {
        let bh = (h - bottom - 14.0) * *n as f64 / max as f64;
        let x0 = bw * i as f64;
        let _ = write!(
            svg,
            r#"<rect class="{}" x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}"><title>{}: {n}</title></rect><text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{n}</text><text class="axis" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            esc(class),
            x0 + 2.0,
            h - bottom - bh,
            (bw - 4.0).max(1.0),
            esc(label),
            x0 + bw / 2.0,
            (h - bottom - bh - 3.0).max(10.0),
            x0 + bw / 2.0,
            h - bottom + 14.0,
            esc(label)
        );
    }
    svg.push_str("</svg>");
    svg
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
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("attempt 1 &lt;ok&gt;"));
        assert!(!svg.contains("<ok>"));
        for lane in LANES {
            assert!(svg.contains(lane), "{lane}");
        }
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
        assert!(
            svg.contains(r#"<text class="axis" x="2" y="12">8</text>"#),
            "{svg}"
        );
        assert!(svg.contains("created: 4"));
    }
}
