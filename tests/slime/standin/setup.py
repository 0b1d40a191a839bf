# Stand-in package for rlconform's slime adapter tests (not slime).
version = "0.0.0+standin"
