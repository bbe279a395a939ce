//! Piecewise-linear interpolation over calibration points keyed by model size (billions).

/// Interpolates `points` (sorted by x). Below the first point the value scales in proportion
/// to x (a smaller model holds proportionally less); above the last it continues the last
/// segment's slope, never decreasing (no published point says a bigger model is cheaper).
pub(crate) fn piecewise(points: &[(f64, f64)], x: f64) -> f64 {
    let (x0, y0) = points[0];
    if x <= x0 {
        return y0 * x / x0;
    }
    for w in points.windows(2) {
        let ((xa, ya), (xb, yb)) = (w[0], w[1]);
        if x <= xb {
            return ya + (yb - ya) * (x - xa) / (xb - xa);
        }
    }
    let n = points.len();
    let ((xa, ya), (xb, yb)) = (points[n - 2], points[n - 1]);
    let slope = ((yb - ya) / (xb - xa)).max(0.0);
    yb + slope * (x - xb)
}

#[cfg(test)]
mod tests {
    use super::piecewise;

    #[test]
    fn hits_points_and_interpolates() {
        let pts = [(3.0, 10.0), (7.0, 30.0), (14.0, 20.0)];
        assert_eq!(piecewise(&pts, 3.0), 10.0);
        assert_eq!(piecewise(&pts, 5.0), 20.0);
        assert_eq!(piecewise(&pts, 1.5), 5.0);
        // Last segment decreases: extrapolation stays flat.
        assert_eq!(piecewise(&pts, 20.0), 20.0);
    }
}
