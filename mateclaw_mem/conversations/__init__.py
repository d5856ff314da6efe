"""The conversation log and the Add/Search (AML) service over it."""
