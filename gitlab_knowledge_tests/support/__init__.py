"""Test support: fakes of external services that speak their real protocols on 127.0.0.1."""
