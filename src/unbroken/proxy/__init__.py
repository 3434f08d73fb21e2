"""The resumable proxy: one upstream generation, any number of downstream reconnects."""
