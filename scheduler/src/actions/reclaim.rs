//! `reclaim`: a queue below its deserved share takes resources back from `reclaimable`
//! queues above theirs, never pushing a victim queue below its deserved share (nor its
//! guarantee) and never rising above its own. See [`super::victims`].

use crate::actions::victims::{self, Mode};
use crate::framework::Session;

pub fn run(session: &mut Session) {
    victims::run(session, Mode::Reclaim);
}
