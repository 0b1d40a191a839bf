"""Stand-in for OpenRLHF (rlconform tests): module paths and signatures only."""
