//! `preempt`: inside a queue, a starving gang evicts pods of gangs of strictly lower
//! priority, as few as it needs and whole gangs or spare pods only. See [`super::victims`].

use crate::actions::victims::{self, Mode};
use crate::framework::Session;

pub fn run(session: &mut Session) {
    victims::run(session, Mode::Preempt);
}
