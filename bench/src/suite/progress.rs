//! The suite's progress on stderr: an `indicatif` bar with one step per measurement on a
//! terminal, and one line per step where stderr is not one (a CI log), since the bar
//! draws nothing there.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    steps: u64,
}

impl Progress {
    pub fn new(steps: u64) -> Self {
        let bar = ProgressBar::new(steps);
        if let Ok(style) =
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        // Redrawn twice a second so the elapsed time moves during a long measurement.
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_millis(500));
        }
        Self { bar, steps }
    }

    /// Announces the measurement about to run.
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
        if self.bar.is_hidden() {
            eprintln!("suite [{}/{}] {what}", self.bar.position() + 1, self.steps);
        }
    }

    /// One measurement done, with a line that stays above the bar (or in the log).
    pub fn done(&self, result: &str) {
        if self.bar.is_hidden() {
            eprintln!("suite       {result}");
        } else {
            self.bar.println(result);
        }
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
