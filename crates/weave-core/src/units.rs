//! Explicit units. Time is integer microseconds; money is integer micro-dollars; bytes are
//! decimal (1 GB = 10^9 B, as the paper's tables use).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in time or a duration, in integer microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Micros(pub u64);

impl Micros {
    pub const ZERO: Micros = Micros(0);
    pub const MAX: Micros = Micros(u64::MAX);
    pub const PER_SECOND: u64 = 1_000_000;
    pub const PER_HOUR: u64 = 3_600 * Self::PER_SECOND;

    pub const fn from_secs(s: u64) -> Self {
        Micros(s * Self::PER_SECOND)
    }

    /// Rounds to the nearest microsecond; negative or non-finite input saturates to 0 / MAX.
    pub fn from_secs_f64(s: f64) -> Self {
        if s.is_nan() || s <= 0.0 {
            Micros(0)
        } else if s >= u64::MAX as f64 / 1e6 {
            Micros::MAX
        } else {
            Micros((s * 1e6).round() as u64)
        }
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    pub fn as_hours_f64(self) -> f64 {
        self.0 as f64 / Self::PER_HOUR as f64
    }

    pub fn saturating_sub(self, other: Micros) -> Micros {
        Micros(self.0.saturating_sub(other.0))
    }

    /// Scales by a non-negative factor, rounding to the nearest microsecond.
    pub fn scale(self, factor: f64) -> Micros {
        Micros::from_secs_f64(self.as_secs_f64() * factor)
    }
}

impl Add for Micros {
    type Output = Micros;
    fn add(self, o: Micros) -> Micros {
        Micros(self.0.saturating_add(o.0))
    }
}

impl AddAssign for Micros {
    fn add_assign(&mut self, o: Micros) {
        self.0 = self.0.saturating_add(o.0);
    }
}

impl Sub for Micros {
    type Output = Micros;
    fn sub(self, o: Micros) -> Micros {
        self.saturating_sub(o)
    }
}

impl std::iter::Sum for Micros {
    fn sum<I: Iterator<Item = Micros>>(iter: I) -> Micros {
        iter.fold(Micros::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.as_secs_f64();
        if s >= 3_600.0 {
            write!(f, "{:.2} h", s / 3_600.0)
        } else {
            write!(f, "{s:.1} s")
        }
    }
}

/// A byte count (decimal units).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    pub const GB: u64 = 1_000_000_000;
    pub const TB: u64 = 1_000 * Self::GB;

    pub fn from_gb_f64(gb: f64) -> Self {
        Bytes((gb.max(0.0) * Self::GB as f64).round() as u64)
    }

    pub fn as_gb_f64(self) -> f64 {
        self.0 as f64 / Self::GB as f64
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, o: Bytes) -> Bytes {
        Bytes(self.0.saturating_add(o.0))
    }
}

impl std::iter::Sum for Bytes {
    fn sum<I: Iterator<Item = Bytes>>(iter: I) -> Bytes {
        iter.fold(Bytes(0), |a, b| a + b)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} GB", self.as_gb_f64())
    }
}

/// A link rate in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bandwidth(pub u64);

impl Bandwidth {
    pub const fn gbit(g: u64) -> Self {
        Bandwidth(g * 1_000_000_000)
    }

    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64 / 8.0
    }

    /// Time to push `bytes` at `efficiency` (0..=1] of line rate.
    pub fn transfer_time(self, bytes: Bytes, efficiency: f64) -> Micros {
        if self.0 == 0 || efficiency <= 0.0 {
            return Micros::MAX;
        }
        Micros::from_secs_f64(bytes.0 as f64 / (self.bytes_per_sec() * efficiency))
    }
}

/// Money in integer micro-dollars (signed, so differences are representable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Money(pub i64);

impl Money {
    pub const ZERO: Money = Money(0);

    pub fn from_dollars(d: f64) -> Self {
        Money((d * 1e6).round() as i64)
    }

    pub fn as_dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, o: Money) -> Money {
        Money(self.0.saturating_add(o.0))
    }
}

impl Sub for Money {
    type Output = Money;
    fn sub(self, o: Money) -> Money {
        Money(self.0.saturating_sub(o.0))
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, o: Money) {
        self.0 = self.0.saturating_add(o.0);
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${:.2}", self.as_dollars())
    }
}

/// A price in micro-dollars per GPU-hour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Price(pub u64);

impl Price {
    pub fn per_gpu_hour(dollars: f64) -> Self {
        Price((dollars.max(0.0) * 1e6).round() as u64)
    }

    pub fn dollars_per_gpu_hour(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Cost of holding `gpus` GPUs for `t`. Exact integer arithmetic, rounded to the nearest
    /// micro-dollar, so summing costs stays deterministic.
    pub fn cost(self, gpus: u64, t: Micros) -> Money {
        let num = self.0 as u128 * gpus as u128 * t.0 as u128;
        let den = Micros::PER_HOUR as u128;
        Money(((num + den / 2) / den).min(i64::MAX as u128) as i64)
    }

    /// Cost of GPU-time already summed in GPU-microseconds.
    pub fn cost_of_gpu_micros(self, gpu_micros: u128) -> Money {
        let den = Micros::PER_HOUR as u128;
        Money(((self.0 as u128 * gpu_micros + den / 2) / den).min(i64::MAX as u128) as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_cost_is_exact_for_whole_hours() {
        let h20 = Price::per_gpu_hour(1.85);
        assert_eq!(h20.cost(8, Micros(Micros::PER_HOUR)), Money::from_dollars(14.8));
        assert_eq!(h20.cost_of_gpu_micros(8 * Micros::PER_HOUR as u128), Money::from_dollars(14.8));
    }

    #[test]
    fn micros_from_secs_saturates_on_bad_input() {
        assert_eq!(Micros::from_secs_f64(-3.0), Micros(0));
        assert_eq!(Micros::from_secs_f64(f64::NAN), Micros(0));
        assert_eq!(Micros::from_secs_f64(f64::INFINITY), Micros::MAX);
        assert_eq!(Micros::from_secs_f64(1.5), Micros(1_500_000));
    }

    #[test]
    fn bandwidth_transfer_time() {
        // 20 Gb/s moves 2.5 GB/s: 10 GB takes 4 s at full efficiency.
        let t = Bandwidth::gbit(20).transfer_time(Bytes(10 * Bytes::GB), 1.0);
        assert_eq!(t, Micros::from_secs(4));
    }
}
