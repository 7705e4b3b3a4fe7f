//! `reclaim`: an Open queue below its deserved share takes resources back from
//! `reclaimable` queues above theirs, each victim taken only while its queue still holds
//! more than its deserved share (as Volcano's proportion), never below its guarantee, and
//! never rising above its own share. Victims go lower job priority first, then lower queue
//! priority. See [`super::victims`].

use crate::actions::victims::{self, Mode};
use crate::framework::Session;

pub fn run(session: &mut Session) {
    victims::run(session, Mode::Reclaim);
}
