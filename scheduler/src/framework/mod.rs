pub mod conf;
