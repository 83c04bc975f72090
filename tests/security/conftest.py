"""The security suite: one test per finding of the outside review, named for the behaviour
it keeps. Each test failed on the code before its fix."""
