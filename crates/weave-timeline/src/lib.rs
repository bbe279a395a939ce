//! The phase timeline of co-execution groups as inline SVG, drawn from the dispatcher's log
//! (`weave_dispatch::EventRecord`), and the SVG primitives behind it and the report's charts.
//! Below the simulator: the server's status page draws its timeline with it without linking
//! the replay. Pure: takes data, returns a string.

pub mod svg;
mod timeline;

pub use timeline::{Bar, BarKind, GroupTimeline, Lane, Timeline};

/// The timeline section alone (the report and the live status page).
pub fn render_timeline(t: &Timeline) -> String {
    timeline::render(t)
}
