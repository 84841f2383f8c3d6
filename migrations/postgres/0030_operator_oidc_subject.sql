-- Operators who sign in through an OpenID Connect provider: the provider's subject
-- (`issuer|sub`), unique. Their role and tenants follow their groups at each sign-in; they
-- have no local password.
ALTER TABLE operators ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX operators_oidc_subject ON operators (oidc_subject);
