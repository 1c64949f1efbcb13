import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    // Integration files start their own redis-server processes and child workers; two files at a time fit 2 cores.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // The suite itself must not leave unhandled rejections behind; vitest fails the run if it sees one.
    dangerouslyIgnoreUnhandledErrors: false,
    // test/types/*.test.ts are compile-time assertions (expectTypeOf, @ts-expect-error): vitest also
    // type-checks them with tsc, so a wrong type fails `npm test`, not only `npm run typecheck`.
    typecheck: { enabled: true, include: ['test/types/**/*.test.ts'], tsconfig: './tsconfig.json' },
  },
});
