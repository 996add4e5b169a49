// The object the test precompiled header (test_pch.h) is built with; it has no code.
