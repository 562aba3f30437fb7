"""Queries grouped by aggregate: variants, jobs, runs, winners, leaderboard, fingerprints.

Read functions never commit. Functions that are a whole unit of work (create a variant, create a
job with its runs, cancel, claim, record a result) commit themselves, so a Celery task or a request
handler calls one function and the transaction boundary is where the function says it is.
"""
