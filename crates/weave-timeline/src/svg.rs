//! A tiny SVG writer: just what the charts need, with escaped text and fixed-precision
//! numbers so the output is byte-for-byte reproducible.

use std::fmt::Write;

pub const PALETTE: [&str; 10] =
    ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub struct Svg {
    pub width: f64,
    pub height: f64,
    body: String,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Self {
        Svg { width, height, body: String::new() }
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: Option<&str>) {
        let _ =
            write!(self.body, r#"<rect x="{x:.1}" y="{y:.1}" width="{:.2}" height="{h:.1}" fill="{fill}""#, w.max(0.0));
        match title {
            Some(t) => {
                let _ = write!(self.body, "><title>{}</title></rect>", escape(t));
            }
            None => self.body.push_str("/>"),
        }
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, dash: bool) {
        let d = if dash { r#" stroke-dasharray="4 3""# } else { "" };
        let _ =
            write!(self.body, r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}"{d}/>"#);
    }

    pub fn text(&mut self, x: f64, y: f64, anchor: &str, s: &str) {
        let _ = write!(self.body, r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#, escape(s));
    }

    pub fn circle(&mut self, x: f64, y: f64, r: f64, fill: &str, title: &str) {
        let _ = write!(
            self.body,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}" fill="{fill}" fill-opacity="0.75"><title>{}</title></circle>"#,
            escape(title)
        );
    }

    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str) {
        let mut p = String::new();
        for (x, y) in points {
            let _ = write!(p, "{x:.1},{y:.1} ");
        }
        let _ = write!(
            self.body,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="1.5"/>"#,
            p.trim_end()
        );
    }

    pub fn finish(self, label: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{:.0}" viewBox="0 0 {:.0} {:.0}" role="img" aria-label="{}" font-family="sans-serif" font-size="11">{}</svg>"#,
            self.width,
            self.height,
            self.width,
            self.height,
            escape(label),
            self.body
        )
    }
}

/// Round tick values covering [lo, hi].
pub fn ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if hi <= lo || !lo.is_finite() || !hi.is_finite() {
        return vec![lo];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    out
}

/// A number for an axis label.
pub fn label(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v.abs() >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Labels for `ticks`: [`label`]'s, unless that would print two ticks alike (a narrow window
/// far from zero: "11k" twice, or "0.00" twice), then as many decimals as the step needs.
pub fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let short: Vec<String> = ticks.iter().map(|v| label(*v)).collect();
    if short.windows(2).all(|w| w[0] != w[1]) {
        return short;
    }
    let step = ticks.windows(2).map(|w| w[1] - w[0]).fold(f64::INFINITY, f64::min);
    let decimals = if step.is_finite() && step > 0.0 { (-step.log10().floor()).max(0.0) as usize } else { 0 };
    ticks.iter().map(|v| format!("{v:.decimals$}")).collect()
}

/// Plot area with linear x and y scales, axes, ticks and axis titles.
pub struct Plot {
    pub svg: Svg,
    pub left: f64,
    pub top: f64,
    pub w: f64,
    pub h: f64,
    pub x: (f64, f64),
    pub y: (f64, f64),
}

impl Plot {
    pub fn new(width: f64, height: f64, x: (f64, f64), y: (f64, f64), x_title: &str, y_title: &str) -> Plot {
        Self::with_left(width, height, 64.0, x, y, x_title, y_title)
    }

    /// With a chosen left margin (for long category labels).
    pub fn with_left(
        width: f64,
        height: f64,
        left: f64,
        x: (f64, f64),
        y: (f64, f64),
        x_title: &str,
        y_title: &str,
    ) -> Plot {
        let (top, right, bottom) = (16.0, 16.0, 44.0);
        let x = if x.1 > x.0 { x } else { (x.0, x.0 + 1.0) };
        let y = if y.1 > y.0 { y } else { (y.0, y.0 + 1.0) };
        let mut p =
            Plot { svg: Svg::new(width, height), left, top, w: width - left - right, h: height - top - bottom, x, y };
        p.axes(x_title, y_title);
        p
    }

    pub fn px(&self, v: f64) -> f64 {
        self.left + (v - self.x.0) / (self.x.1 - self.x.0) * self.w
    }

    pub fn py(&self, v: f64) -> f64 {
        self.top + self.h - (v - self.y.0) / (self.y.1 - self.y.0) * self.h
    }

    fn axes(&mut self, x_title: &str, y_title: &str) {
        let (l, t, w, h) = (self.left, self.top, self.w, self.h);
        self.svg.line(l, t + h, l + w, t + h, "#333", false);
        self.svg.line(l, t, l, t + h, "#333", false);
        let xs = ticks(self.x.0, self.x.1, 6);
        for (v, text) in xs.iter().zip(tick_labels(&xs)) {
            let x = self.px(*v);
            self.svg.line(x, t + h, x, t + h + 4.0, "#333", false);
            self.svg.text(x, t + h + 16.0, "middle", &text);
        }
        for v in ticks(self.y.0, self.y.1, 5).into_iter().filter(|_| !y_title.is_empty()) {
            let y = self.py(v);
            self.svg.line(l - 4.0, y, l, y, "#333", false);
            self.svg.line(l, y, l + w, y, "#eee", false);
            self.svg.text(l - 6.0, y + 4.0, "end", &label(v));
        }
        self.svg.text(l + w / 2.0, t + h + 34.0, "middle", x_title);
        let _ = write!(
            self.svg.body,
            r#"<text x="12" y="{:.1}" text-anchor="middle" transform="rotate(-90 12 {:.1})">{}</text>"#,
            t + h / 2.0,
            t + h / 2.0,
            escape(y_title)
        );
    }
}

/// An HTML legend: coloured swatches with names, spaced by their own style (a page without
/// the `legend` class's style ran the names together).
pub fn legend(items: &[(String, &str)]) -> String {
    let mut s = String::from(r#"<div class="legend">"#);
    for (name, c) in items {
        let _ = write!(
            s,
            r#"<span style="display:inline-block;margin-right:12px;font-size:12px"><i style="display:inline-block;width:10px;height:10px;margin-right:4px;background:{c}"></i>{}</span>"#,
            escape(name)
        );
    }
    s.push_str("</div>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_never_print_two_ticks_alike() {
        assert_eq!(tick_labels(&[0.0, 5.0, 10.0]), ["0", "5", "10"]);
        assert_eq!(tick_labels(&[20_000.0, 40_000.0]), ["20k", "40k"]);
        // A narrow window far from zero, and one below a hundredth.
        assert_eq!(tick_labels(&[10_000.0, 10_005.0, 10_010.0]), ["10000", "10005", "10010"]);
        assert_eq!(tick_labels(&[0.001, 0.002, 0.003]), ["0.001", "0.002", "0.003"]);
    }
}
