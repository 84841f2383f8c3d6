// A real OpenID provider for the browser tests: npm's oidc-provider, a certified
// implementation, with its development sign-in pages (any name and password sign in). The
// groups claim comes from the name: `admin-…` is in fenceline-admins, `acme-…` in acme-ops,
// anyone else in no group Fenceline knows. Started by scripts/e2e.sh; never for production.
import Provider from 'oidc-provider';

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const groupsOf = (id) =>
  id.startsWith('admin-') ? ['fenceline-admins'] : id.startsWith('acme-') ? ['acme-ops'] : ['strangers'];

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.OIDC_CLIENT_ID,
      client_secret: process.env.OIDC_CLIENT_SECRET,
      redirect_uris: [process.env.OIDC_REDIRECT_URI],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    },
  ],
  claims: { openid: ['sub'], profile: ['preferred_username', 'name'], groups: ['groups'] },
  scopes: ['openid', 'profile', 'groups'],
  // The profile and groups claims in the ID token itself, as Fenceline reads them there.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['e2e-only, not a secret'] },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: id, groups: groupsOf(id) };
      },
    };
  },
});

provider.listen(port, '127.0.0.1', () => console.log(`oidc-provider listening at ${issuer}`));
