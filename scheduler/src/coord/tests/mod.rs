mod e2e;
mod unit;
