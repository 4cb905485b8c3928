"""The ledger's migration history before it was squashed (14 migrations, four branches and four
merges), kept only so that tests/ledger/test_migration_history.py can build a database the way
every existing one was built and upgrade it to ledger/migrations. Not used by the project."""
