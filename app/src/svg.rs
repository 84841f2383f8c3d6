//! Charts as data: the server computes shapes, this module draws them as SVG. Every label and
//! tooltip is text that Leptos escapes, so nothing a job carries can become markup.

use leptos::prelude::*;

/// One chart: a viewBox of `width` × `height`, shapes in drawing order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Svg {
    pub width: f64,
    pub height: f64,
    /// What the chart shows, for screen readers.
    pub label: String,
    /// The CSS class of the `<svg>` element (its colours come from CSS).
    pub class: String,
    pub shapes: Vec<Shape>,
}

/// Where a text sits relative to its `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Anchor {
    #[default]
    Start,
    Middle,
    End,
}

impl Anchor {
    fn as_str(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// A shape of a chart. `title` is its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Rect {
        x: f64,
        y: f64,
        width: f64,
        height: f64,
        rx: f64,
        class: String,
        title: Option<String>,
    },
    Line {
        x1: f64,
        y1: f64,
        x2: f64,
        y2: f64,
        class: String,
    },
    Text {
        x: f64,
        y: f64,
        anchor: Anchor,
        class: String,
        text: String,
        title: Option<String>,
    },
    /// An open line through `points`.
    Polyline {
        points: Vec<(f64, f64)>,
        class: String,
    },
    Circle {
        cx: f64,
        cy: f64,
        r: f64,
        class: String,
        title: Option<String>,
    },
    /// Shapes that share a class and a tooltip.
    Group {
        class: String,
        title: Option<String>,
        shapes: Vec<Shape>,
    },
}

impl Svg {
    /// Every text the chart shows, in order (for tests and accessibility checks).
    pub fn texts(&self) -> Vec<&str> {
        fn walk<'a>(shapes: &'a [Shape], out: &mut Vec<&'a str>) {
            for shape in shapes {
                match shape {
                    Shape::Text { text, .. } => out.push(text),
                    Shape::Group { shapes, .. } => walk(shapes, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.shapes, &mut out);
        out
    }
}

fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

fn tooltip(title: Option<String>) -> impl IntoView {
    title.map(|t| view! { <title>{t}</title> })
}

fn shape(s: Shape) -> AnyView {
    match s {
        Shape::Rect {
            x,
            y,
            width,
            height,
            rx,
            class,
            title,
        } => view! {
            <rect class=class x=num(x) y=num(y) width=num(width) height=num(height)
                rx=(rx > 0.0).then(|| num(rx))>{tooltip(title)}</rect>
        }
        .into_any(),
        Shape::Line {
            x1,
            y1,
            x2,
            y2,
            class,
        } => view! { <line class=class x1=num(x1) y1=num(y1) x2=num(x2) y2=num(y2)/> }.into_any(),
        Shape::Text {
            x,
            y,
            anchor,
            class,
            text,
            title,
        } => view! {
            <text class=class x=num(x) y=num(y)
                text-anchor=(anchor != Anchor::Start).then(|| anchor.as_str())>
                {tooltip(title)}{text}
            </text>
        }
        .into_any(),
        Shape::Polyline { points, class } => {
            let points = points
                .iter()
                .map(|(x, y)| format!("{},{}", num(*x), num(*y)))
                .collect::<Vec<_>>()
                .join(" ");
            view! { <polyline class=class fill="none" points=points/> }.into_any()
        }
        Shape::Circle {
            cx,
            cy,
            r,
            class,
            title,
        } => view! {
            <circle class=class cx=num(cx) cy=num(cy) r=num(r)>{tooltip(title)}</circle>
        }
        .into_any(),
        Shape::Group {
            class,
            title,
            shapes,
        } => view! {
            <g class=class>{tooltip(title)}{shapes.into_iter().map(shape).collect_view()}</g>
        }
        .into_any(),
    }
}

/// Draws a chart.
#[component]
pub fn SvgChart(chart: Svg) -> impl IntoView {
    view! {
        <svg xmlns="http://www.w3.org/2000/svg"
            viewBox=format!("0 0 {} {}", num(chart.width), num(chart.height))
            role="img" aria-label=chart.label class=chart.class>
            {chart.shapes.into_iter().map(shape).collect_view()}
        </svg>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_text_never_markup() {
        let chart = Svg {
            width: 100.0,
            height: 20.0,
            label: "a <chart>".into(),
            class: "bars-svg".into(),
            shapes: vec![Shape::Text {
                x: 1.0,
                y: 12.5,
                anchor: Anchor::End,
                class: "axis".into(),
                text: "<script>alert(1)</script>".into(),
                title: Some("\"quoted\" & <b>".into()),
            }],
        };
        let html = view! { <SvgChart chart/> }.to_html();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains(r#"viewBox="0 0 100 20""#), "{html}");
        assert!(html.contains(r#"text-anchor="end""#), "{html}");
        assert!(html.contains(r#"y="12.5""#), "{html}");
    }
}
