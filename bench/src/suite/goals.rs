//! The goals, judged from the figures of the run: every verdict is computed from
//! a measured value, never written by hand, and a figure that was not measured says so.

use std::fmt;

/// Which side of the target passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    AtLeast,
    AtMost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Met,
    NotMet,
    /// No figure: the row failed, timed out or was not run.
    NotMeasured,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**not met**",
            Verdict::NotMeasured => "not measured",
        })
    }
}

/// A goal: what is measured, the side that passes, the target, and how to print a value.
#[derive(Debug, Clone)]
pub struct Goal {
    pub what: String,
    pub cmp: Cmp,
    pub target: f64,
    /// Decimals and unit of the printed figures, e.g. `(0, " pods/s")`.
    pub decimals: usize,
    pub unit: &'static str,
}

impl Goal {
    pub fn new(what: impl Into<String>, cmp: Cmp, target: f64) -> Self {
        Self {
            what: what.into(),
            cmp,
            target,
            decimals: 2,
            unit: "",
        }
    }

    pub fn shown(mut self, decimals: usize, unit: &'static str) -> Self {
        self.decimals = decimals;
        self.unit = unit;
        self
    }

    pub fn judge(&self, measured: Option<f64>) -> Verdict {
        match measured.filter(|v| v.is_finite()) {
            None => Verdict::NotMeasured,
            Some(v) => {
                let ok = match self.cmp {
                    Cmp::AtLeast => v >= self.target,
                    Cmp::AtMost => v <= self.target,
                };
                if ok { Verdict::Met } else { Verdict::NotMet }
            }
        }
    }

    fn value(&self, v: f64) -> String {
        format!("{v:.*}{}", self.decimals, self.unit)
    }

    /// A Markdown list item: the goal, the figure, the verdict.
    pub fn line(&self, measured: Option<f64>) -> String {
        let op = match self.cmp {
            Cmp::AtLeast => "≥",
            Cmp::AtMost => "≤",
        };
        let figure = measured
            .filter(|v| v.is_finite())
            .map_or_else(|| "no figure".to_string(), |v| self.value(v));
        format!(
            "- {} {op} {}: {figure}: {}",
            self.what,
            self.value(self.target),
            self.judge(measured)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_figure_is_not_met_and_a_passing_one_is_met() {
        let rate = Goal::new("pods/s at R=3", Cmp::AtLeast, 20_000.0).shown(0, " pods/s");
        // A planted miss: 19,999 pods/s against a floor of 20,000.
        assert_eq!(rate.judge(Some(19_999.0)), Verdict::NotMet);
        assert_eq!(rate.judge(Some(20_000.0)), Verdict::Met);
        assert_eq!(
            rate.line(Some(12_345.4)),
            "- pods/s at R=3 ≥ 20000 pods/s: 12345 pods/s: **not met**"
        );
        let ratio = Goal::new("R=3 wall / R=1 wall", Cmp::AtMost, 1.5);
        assert_eq!(ratio.judge(Some(1.51)), Verdict::NotMet);
        assert_eq!(ratio.judge(Some(0.9)), Verdict::Met);
        assert_eq!(
            ratio.line(Some(1.2)),
            "- R=3 wall / R=1 wall ≤ 1.50: 1.20: met"
        );
    }

    #[test]
    fn no_figure_or_a_nan_is_not_measured_never_met() {
        let g = Goal::new("x", Cmp::AtMost, 4.0);
        assert_eq!(g.judge(None), Verdict::NotMeasured);
        assert_eq!(g.judge(Some(f64::NAN)), Verdict::NotMeasured);
        assert_eq!(g.line(None), "- x ≤ 4.00: no figure: not measured");
    }
}
