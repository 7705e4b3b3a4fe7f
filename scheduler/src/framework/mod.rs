//! The scheduling framework: one cycle's [`Session`], the [`Statement`] that makes gangs
//! all-or-nothing, the [`Plugin`] trait and how tiers of plugins combine ([`PluginSet`]),
//! and the cycle itself ([`run_cycle`]): open a session, run the configured actions, close
//! it into a [`CyclePlan`]. Everything here is a plain function of its inputs; no IO.

pub mod conf;
pub mod cycle;
pub mod explain;
pub mod fit;
pub mod node_picker;
pub mod ordered_queue;
pub mod plan;
pub mod plugin;
pub mod plugin_set;
pub mod scope;
pub mod session;
pub mod state_cache;
pub mod statement;
#[cfg(test)]
pub mod testing;
pub mod timeout;
pub mod view;

pub use conf::SchedulerConf;
pub use cycle::{
    run_cycle, run_cycle_in_view, run_cycle_on_state, run_cycle_owning_all, run_cycle_scoped,
    run_cycle_scoped_on_state,
};
pub use fit::{FitErrors, Unfit};
pub use plan::{CyclePlan, Event, Eviction, GangPlacement, Placement};
pub use plugin::{Invalid, Plugin, Vote};
pub use plugin_set::PluginSet;
pub use scope::{CycleScope, HomePool};
pub use session::{JobId, NodeId, QueueId, Session, SessionState, TaskId, TaskStatus};
pub use state_cache::StateCache;
pub use statement::Statement;
pub use view::RoundView;
