"""A real OpenID Connect provider for the single sign-on tests: django-oauth-toolkit in a Django
process of its own (``settings`` here), started on loopback by ``tests.support.oidc``.

It signs ID tokens with an RSA key made at the test's start (``OIDC_PROVIDER_KEY``), requires
PKCE, puts the person's groups in the ID token and the userinfo answer (``claims``), and offers
RP-initiated logout. Its people and its one client are set by its management commands
(``provider_client``, ``provider_person``) against its SQLite file.
"""
